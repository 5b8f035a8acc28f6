"""One scheduled micro-batch as model inputs: packed or padded token rows and the trainable-token targets.

Packed: one row of concatenated sequences whose position ids restart at 0 for every sequence and no
attention mask, so transformers builds a block-diagonal causal mask (attention never crosses sequences).
Padded: one sequence per row, right-padded, with an attention mask. Either way the row is filled up to the
schedule's slot count (packed: a trailing dummy segment; padded: row width), so shapes follow the schedule.
Shared prefix (`trainer.shared_prefix`): a right-padded prefix row per family, run first, and a right-padded suffix
row per sample whose positions continue its family's prefix and whose attention mask covers the prefix columns (its
own family's real tokens) then its own.

Only trainable tokens get logits: target i is the token at sample position p, predicted by the hidden state at
(row, column of p - 1). The loss inputs are compacted to those N targets in the same order, and so are the sampling
parameters of each target's sample (None when every member was sampled at temperature 1 without filtering).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from trainer.backends.sampling_filter import TargetSampling
from trainer.losses import AggMode, LossBatch, LossDenominators
from trainer.samples import Sample
from trainer.scheduling import Layout, MicroBatch
from trainer.shared_prefix import prefix_families


@dataclass(frozen=True)
class PrefixRows:
    """The family prefixes of a shared-prefix micro-batch, run once before its suffix rows."""

    input_ids: torch.Tensor
    """Prefix token IDs [families, prefix width], right-padded."""
    attention_mask: torch.Tensor
    """[families, prefix width] 1 on real prefix tokens (a family with an empty prefix: 1 on one pad, never attended
    to by its suffixes)."""
    family_R: torch.Tensor
    """Prefix row of each suffix row."""


@dataclass(frozen=True)
class ModelInputs:
    """Tensors for one forward pass and the loss over its trainable tokens."""

    input_ids: torch.Tensor
    """Token IDs [rows, width] (int64)."""
    position_ids: torch.Tensor
    """Positions [rows, width], restarting at 0 for every packed sequence."""
    attention_mask: torch.Tensor | None
    """[rows, width] 1 on real tokens for padded rows; None when packed (mask derived from position_ids); with a
    prefix [rows, prefix width + width], the prefix columns first."""
    target_rows_N: torch.Tensor
    """Row of the hidden state that predicts each trainable token."""
    target_cols_N: torch.Tensor
    """Column of that hidden state (the trainable token's column - 1)."""
    target_ids_N: torch.Tensor
    """The trainable tokens."""
    loss: LossBatch
    """Old logprobs, advantages, weights and token shares of the N targets."""
    num_tokens: int
    """Real tokens in the micro-batch."""
    sampling: TargetSampling | None = None
    """Each target's sampling parameters; None when all are temperature 1 without filtering (the fast path)."""
    prefix: PrefixRows | None = None
    """Family prefixes the rows continue (shared_prefix layout); None: rows start at position 0."""


def build_model_inputs(
    samples: Sequence[Sample],
    advantages_S: np.ndarray,
    micro_batch: MicroBatch,
    *,
    layout: Layout,
    denominators: LossDenominators,
    agg_mode: AggMode,
    pad_token_id: int,
) -> ModelInputs:
    """Model inputs for a micro-batch of `samples` (indexed by its ScheduledSequence.sample_index)."""
    members = [samples[seq.sample_index] for seq in micro_batch.sequences]
    for seq, sample in zip(micro_batch.sequences, members, strict=True):
        if sample.num_tokens > 0 and bool(sample.loss_mask_T[0]):
            raise ValueError(
                f"sample {seq.sample_index} of rollout {sample.rollout_id!r} has a trainable token at "
                "position 0, which no context predicts; give every sample a non-empty prompt"
            )
    prefix = None
    if layout == "packed":
        rows, cols, input_ids, position_ids, attention_mask = _packed(members, micro_batch.slots, pad_token_id)
    elif layout == "padded":
        rows, cols, input_ids, position_ids, attention_mask = _padded(members, micro_batch.slots, pad_token_id)
    elif layout == "shared_prefix":
        (rows, cols, input_ids, position_ids, attention_mask), prefix = _shared_prefix(members, pad_token_id)
    else:
        raise ValueError(f"layout {layout!r}: use 'packed', 'padded' or 'shared_prefix'")
    advantages = [float(advantages_S[seq.sample_index]) for seq in micro_batch.sequences]
    full = LossBatch.pack(members, advantages, denominators, agg_mode)
    mask_T = torch.from_numpy(np.concatenate([np.asarray(s.loss_mask_T, dtype=bool) for s in members]))
    token_ids_T = torch.from_numpy(np.concatenate([np.asarray(s.token_ids_T, dtype=np.int64) for s in members]))
    keep_N = mask_T.nonzero().squeeze(-1)
    loss = LossBatch(
        old_logprobs_T=full.old_logprobs_T[keep_N],
        advantages_T=full.advantages_T[keep_N],
        weights_T=full.weights_T[keep_N],
        token_share_T=full.token_share_T[keep_N],
    )
    return ModelInputs(
        input_ids=input_ids,
        position_ids=position_ids,
        attention_mask=attention_mask,
        target_rows_N=rows[keep_N],
        target_cols_N=cols[keep_N] - 1,
        target_ids_N=token_ids_T[keep_N],
        loss=loss,
        num_tokens=micro_batch.num_tokens,
        sampling=TargetSampling.from_params([s.sampling for s in members], [s.num_trainable_tokens for s in members]),
        prefix=prefix,
    )


Layout2D = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]


def _packed(members: list[Sample], slots: int, pad_token_id: int) -> Layout2D:
    """One row: sequences back to back, then a dummy segment (positions from 0) up to `slots`."""
    lengths = [s.num_tokens for s in members]
    total = sum(lengths)
    width = max(slots, total)
    input_ids = torch.full((1, width), pad_token_id, dtype=torch.int64)
    position_ids = torch.zeros((1, width), dtype=torch.int64)
    start = 0
    for sample, n in zip(members, lengths, strict=True):
        input_ids[0, start : start + n] = torch.tensor(sample.token_ids_T, dtype=torch.int64)
        position_ids[0, start : start + n] = torch.arange(n)
        start += n
    position_ids[0, total:] = torch.arange(width - total)
    rows = torch.zeros(total, dtype=torch.int64)
    cols = torch.arange(total, dtype=torch.int64)
    return rows, cols, input_ids, position_ids, None


def _padded(members: list[Sample], slots: int, pad_token_id: int) -> Layout2D:
    """One right-padded row per sequence, `slots / rows` wide (at least the longest sequence)."""
    lengths = [s.num_tokens for s in members]
    width = max(max(lengths, default=0), slots // max(len(members), 1))
    input_ids = torch.full((len(members), width), pad_token_id, dtype=torch.int64)
    attention_mask = torch.zeros((len(members), width), dtype=torch.int64)
    for row, (sample, n) in enumerate(zip(members, lengths, strict=True)):
        input_ids[row, :n] = torch.tensor(sample.token_ids_T, dtype=torch.int64)
        attention_mask[row, :n] = 1
    position_ids = torch.arange(width, dtype=torch.int64).expand(len(members), width).contiguous()
    rows = torch.cat([torch.full((n,), row, dtype=torch.int64) for row, n in enumerate(lengths)] or [torch.zeros(0)])
    cols = torch.cat([torch.arange(n, dtype=torch.int64) for n in lengths] or [torch.zeros(0)])
    return rows.long(), cols.long(), input_ids, position_ids, attention_mask


def _shared_prefix(members: list[Sample], pad_token_id: int) -> tuple[Layout2D, PrefixRows | None]:
    """A prefix row per family and a suffix row per member (`members` order); targets in suffix coordinates."""
    families = prefix_families(members, range(len(members)))
    family_of = {i: f for f, family in enumerate(families) for i in family.members}
    starts = [families[family_of[i]].prefix_len for i in range(len(members))]
    prefix_width = max(family.prefix_len for family in families)
    suffix_width = max(s.num_tokens - start for s, start in zip(members, starts, strict=True))
    input_ids = torch.full((len(members), suffix_width), pad_token_id, dtype=torch.int64)
    suffix_mask = torch.zeros((len(members), suffix_width), dtype=torch.int64)
    for row, (sample, start) in enumerate(zip(members, starts, strict=True)):
        input_ids[row, : sample.num_tokens - start] = torch.tensor(sample.token_ids_T[start:], dtype=torch.int64)
        suffix_mask[row, : sample.num_tokens - start] = 1
    position_ids = torch.tensor(starts, dtype=torch.int64)[:, None] + torch.arange(suffix_width)[None, :]
    rows = torch.cat([torch.full((s.num_tokens,), row, dtype=torch.int64) for row, s in enumerate(members)])
    cols = torch.cat([torch.arange(s.num_tokens, dtype=torch.int64) - start
                      for s, start in zip(members, starts, strict=True)])
    if prefix_width == 0:
        return (rows, cols, input_ids, position_ids, suffix_mask), None
    prefix_ids = torch.full((len(families), prefix_width), pad_token_id, dtype=torch.int64)
    prefix_mask = torch.zeros((len(families), prefix_width), dtype=torch.int64)
    for f, family in enumerate(families):
        first = members[family.members[0]]
        prefix_ids[f, : family.prefix_len] = torch.tensor(first.token_ids_T[: family.prefix_len], dtype=torch.int64)
        prefix_mask[f, : max(family.prefix_len, 1)] = 1
    family_R = torch.tensor([family_of[i] for i in range(len(members))], dtype=torch.int64)
    real_prefix = (torch.arange(prefix_width)[None, :] < torch.tensor([f.prefix_len for f in families])[:, None])
    attention_mask = torch.cat([real_prefix.long().index_select(0, family_R), suffix_mask], dim=1)
    return (rows, cols, input_ids, position_ids, attention_mask), PrefixRows(prefix_ids, prefix_mask, family_R)
