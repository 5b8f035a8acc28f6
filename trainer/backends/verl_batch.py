"""One optimizer update's samples in verl's left/right-padded batch layout (pure numpy, no verl import).

verl's actor takes rows of `prompts` (left-padded) followed by `responses` (right-padded): `input_ids` is their
concatenation, `attention_mask` is 1 on real tokens, `position_ids` count real tokens from 0 (0 on padding), and
every per-token training input (`response_mask`, `old_log_probs`, `advantages`) covers the response region only.
A harnessed sample is multi-turn: observation tokens sit between trainable responses. Its prompt is every token
before the first trainable token; its response is the rest, observations included, and `response_mask` is our loss
mask there, so observations are context but never trained on.

`token_weights` carries the loss weight of each trainable token from the update's global denominators
(`trainer.losses.LossDenominators`), so the weighted token sum is the update's loss however verl splits the rows
into micro-batches. Rows are grouped by data-parallel rank (verl hands rank r the r-th equal chunk): each rank's
sequences come from the schedule's worker plan, and ranks with fewer sequences get filler rows (two pad tokens, no
trainable token, weight 0) so all chunks have the same number of rows. Provenance rides along per row.

verl's actor divides every row's logits by one `temperature` (its meta_info) and applies no top-k, min-p or top-p.
So an update's temperature is the one its samples were sampled at (`Sample.sampling`, recorded by the gateway); samples
sampled at different temperatures, or with top-k / min-p / top-p filtering, cannot be trained by verl with the right
logprobs and are refused with the fix: enforce the policy's sampling at the gateway (`sampling.train: enforce`).

Decoupled PPO (`LossConfig.off_policy.recompute_behaviour`): `with_recomputed_logprobs` returns the rows with the
trainer's recomputation (verl's forward-only pass at the step's starting weights) as `old_log_probs`, the proximal
logprobs the PPO ratio is clipped around, and the engine's recorded logprobs moved to `rollout_log_probs`
(`ROLLOUT_LOGPROBS_FIELD`, the field `trainer.backends.verl_loss` reads as the behaviour policy's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from trainer.losses import AggMode, LossDenominators
from trainer.samples import Sample, TrainableSpan
from trainer.sampling import SamplingParams
from trainer.scheduling import UpdatePlan

FILLER_SAMPLE_INDEX = -1
"""`sample_index` of filler rows."""
ROLLOUT_LOGPROBS_FIELD = "rollout_log_probs"
"""Batch field of the engine's recorded logprobs when `old_log_probs` holds the trainer's recomputation (verl's name;
`trainer.backends.verl_loss.ROLLOUT_LOGPROBS_KEY`)."""

SpanTuple = tuple[int, int, int, int]
"""A TrainableSpan as plain ints (start, end, call_seq, policy_version), positions within its sample."""


@dataclass(frozen=True, eq=False)
class VerlRows:
    """One optimizer update as verl batch fields: B rows, P prompt columns, R response columns."""

    prompts: np.ndarray
    """[B, P] int64 prompt token IDs, left-padded with the pad token."""
    responses: np.ndarray
    """[B, R] int64 response-region token IDs (responses and observations), right-padded."""
    input_ids: np.ndarray
    """[B, P + R] int64, prompts then responses."""
    attention_mask: np.ndarray
    """[B, P + R] int64, 1 on real tokens."""
    position_ids: np.ndarray
    """[B, P + R] int64, 0-based position of each real token, 0 on padding."""
    response_mask: np.ndarray
    """[B, R] int64, 1 exactly on trainable (sampled) tokens."""
    old_log_probs: np.ndarray
    """[B, R] float32 logprob the PPO ratio is taken against on each trainable token, 0 elsewhere: the rollout's
    (recorded by the gateway), or the trainer's recomputation when `rollout_log_probs` is set (decoupled PPO)."""
    advantages: np.ndarray
    """[B, R] float32 the row's sample advantage on trainable tokens, 0 elsewhere."""
    token_weights: np.ndarray
    """[B, R] float32 loss weight of each trainable token from the update's denominators, 0 elsewhere."""
    policy_versions: np.ndarray
    """[B, R] int64 policy version that sampled each trainable token, -1 elsewhere."""
    sample_index: np.ndarray
    """[B] int64 index of the row's sample in the step's batch, FILLER_SAMPLE_INDEX for fillers."""
    rollout_id: np.ndarray
    """[B] object: the row's rollout id ("" for fillers)."""
    group_id: np.ndarray
    """[B] object: the row's group id ("" for fillers)."""
    call_seqs: np.ndarray
    """[B] object: tuple of the call seqs merged into the row's sample."""
    spans: np.ndarray
    """[B] object: tuple of SpanTuple, the sample's trainable spans."""
    dp_size: int
    """Data-parallel ranks; rows r * B / dp_size ... belong to rank r."""
    trainable_tokens: int
    """Trainable tokens in the update (verl's batch_num_tokens)."""
    temperature: float = 1.0
    """The temperature every trainable token was sampled at (verl's meta_info `temperature`)."""
    rollout_log_probs: np.ndarray | None = None
    """[B, R] float32 rollout logprob of each trainable token (0 elsewhere) when `old_log_probs` holds the trainer's
    recomputation (decoupled PPO, `with_recomputed_logprobs`); None otherwise."""

    @property
    def num_rows(self) -> int:
        """Rows, fillers included."""
        return int(self.input_ids.shape[0])

    @property
    def recorded_log_probs(self) -> np.ndarray:
        """[B, R] the rollout's recorded logprobs (0 off trainable tokens), wherever they are kept."""
        return self.rollout_log_probs if self.rollout_log_probs is not None else self.old_log_probs

    def tensor_fields(self) -> dict[str, np.ndarray]:
        """The per-row numeric fields, by verl's field names (DataProto.batch)."""
        names = (
            "prompts",
            "responses",
            "input_ids",
            "attention_mask",
            "position_ids",
            "response_mask",
            "old_log_probs",
            "advantages",
            "token_weights",
            "policy_versions",
            "sample_index",
        )
        fields = {name: getattr(self, name) for name in names}
        if self.rollout_log_probs is not None:
            fields[ROLLOUT_LOGPROBS_FIELD] = self.rollout_log_probs
        return fields

    def provenance_fields(self) -> dict[str, np.ndarray]:
        """The per-row object fields (DataProto.non_tensor_batch)."""
        return {name: getattr(self, name) for name in ("rollout_id", "group_id", "call_seqs", "spans")}


def split_point(sample: Sample) -> int:
    """Length of the prompt: the position of the first trainable token (the last token when none is trainable)."""
    if sample.num_tokens < 2:
        raise ValueError(
            f"sample of rollout {sample.rollout_id!r} has {sample.num_tokens} token(s); verl needs at least one "
            "prompt and one response token; drop it before training"
        )
    trainable = np.flatnonzero(np.asarray(sample.loss_mask_T, dtype=bool))
    if trainable.size == 0:
        return sample.num_tokens - 1
    if trainable[0] == 0:
        raise ValueError(
            f"sample of rollout {sample.rollout_id!r} has a trainable token at position 0, which no context "
            "predicts; give every sample a non-empty prompt"
        )
    return int(trainable[0])


def rank_rows(update: UpdatePlan, dp_size: int) -> list[list[int]]:
    """Sample indices of each data-parallel rank (the schedule's workers, micro-batch order), fillers as -1."""
    if len(update.workers) != dp_size:
        raise ValueError(
            f"the update was scheduled for {len(update.workers)} workers but verl runs {dp_size} data-parallel "
            "ranks; schedule with ScheduleConfig(num_workers=dp_size)"
        )
    per_rank = [[seq.sample_index for mb in worker.micro_batches for seq in mb.sequences] for worker in update.workers]
    width = max(1, max(len(rows) for rows in per_rank))
    return [rows + [FILLER_SAMPLE_INDEX] * (width - len(rows)) for rows in per_rank]


def verl_temperature(samples: Sequence[Sample]) -> float:
    """The one temperature `samples`' trainable tokens were sampled at (1.0 when none is trainable); ValueError when
    they differ or were filtered (top-k, min-p, top-p), which verl's actor does not reproduce."""
    trained = {sample.sampling for sample in samples if sample.num_trainable_tokens}
    filtered = sorted((p for p in trained if p.filtered), key=SamplingParams.describe)
    if filtered:
        raise ValueError(
            f"samples were sampled with filtering ({filtered[0].describe()}); verl's actor applies no top-k, min-p "
            "or top-p, so its logprobs would not be those of the distribution the tokens were drawn from: set the "
            "gateway's `sampling.train: enforce` (the policy's temperature, no filtering) or train with the torch "
            "backend"
        )
    temperatures = sorted({p.temperature for p in trained})
    if len(temperatures) > 1:
        raise ValueError(
            f"samples were sampled at temperatures {temperatures}; verl's actor divides all logits of an update by "
            "one temperature: set the gateway's `sampling.train: enforce` so every train call samples at the "
            "policy's temperature, or train with the torch backend"
        )
    return temperatures[0] if temperatures else 1.0


def update_denominators(samples: Sequence[Sample], indices: Sequence[int]) -> LossDenominators:
    """The loss denominators of one update from its samples."""
    return LossDenominators.from_sequences(
        [samples[i].rollout_id for i in indices], [samples[i].num_trainable_tokens for i in indices]
    )


def to_verl_rows(
    samples: Sequence[Sample],
    advantages_S: np.ndarray,
    update: UpdatePlan,
    *,
    dp_size: int,
    agg_mode: AggMode,
    pad_token_id: int,
) -> VerlRows:
    """The update's samples as verl rows grouped by rank, with per-token weights from the update's denominators."""
    order = [index for rows in rank_rows(update, dp_size) for index in rows]
    real = [i for i in order if i != FILLER_SAMPLE_INDEX]
    temperature = verl_temperature([samples[i] for i in real])
    denominators = update_denominators(samples, real)
    cuts = {i: split_point(samples[i]) for i in real}
    width_p = max([cuts[i] for i in real] + [1])
    width_r = max([samples[i].num_tokens - cuts[i] for i in real] + [1])
    rows = _Rows.empty(len(order), width_p, width_r, pad_token_id)
    for row, index in enumerate(order):
        if index == FILLER_SAMPLE_INDEX:
            rows.put_filler(row)
            continue
        sample = samples[index]
        weight = denominators.token_weight(agg_mode, sample.rollout_id, sample.num_trainable_tokens)
        rows.put(row, index, sample, cuts[index], float(advantages_S[index]), weight)
    return rows.freeze(dp_size, denominators.tokens, temperature)


@dataclass
class _Rows:
    """Mutable arrays filled row by row."""

    prompts: np.ndarray
    responses: np.ndarray
    prompt_mask: np.ndarray
    response_attention: np.ndarray
    response_mask: np.ndarray
    old_log_probs: np.ndarray
    advantages: np.ndarray
    token_weights: np.ndarray
    policy_versions: np.ndarray
    sample_index: np.ndarray
    provenance: list[tuple[str, str, tuple[int, ...], tuple[SpanTuple, ...]]]

    @classmethod
    def empty(cls, rows: int, width_p: int, width_r: int, pad_token_id: int) -> _Rows:
        return cls(
            prompts=np.full((rows, width_p), pad_token_id, dtype=np.int64),
            responses=np.full((rows, width_r), pad_token_id, dtype=np.int64),
            prompt_mask=np.zeros((rows, width_p), dtype=np.int64),
            response_attention=np.zeros((rows, width_r), dtype=np.int64),
            response_mask=np.zeros((rows, width_r), dtype=np.int64),
            old_log_probs=np.zeros((rows, width_r), dtype=np.float32),
            advantages=np.zeros((rows, width_r), dtype=np.float32),
            token_weights=np.zeros((rows, width_r), dtype=np.float32),
            policy_versions=np.full((rows, width_r), -1, dtype=np.int64),
            sample_index=np.full(rows, FILLER_SAMPLE_INDEX, dtype=np.int64),
            provenance=[("", "", (), ())] * rows,
        )

    def put(self, row: int, index: int, sample: Sample, cut: int, advantage: float, weight: float) -> None:
        n_prompt, n_response = cut, sample.num_tokens - cut
        self.prompts[row, self.prompts.shape[1] - n_prompt :] = sample.token_ids_T[:cut]
        self.prompt_mask[row, self.prompts.shape[1] - n_prompt :] = 1
        self.responses[row, :n_response] = sample.token_ids_T[cut:]
        self.response_attention[row, :n_response] = 1
        mask_R = np.asarray(sample.loss_mask_T[cut:], dtype=bool)
        self.response_mask[row, :n_response] = mask_R
        self.old_log_probs[row, :n_response] = np.where(mask_R, sample.logprobs_T[cut:], 0.0)
        self.advantages[row, :n_response] = np.where(mask_R, advantage, 0.0)
        self.token_weights[row, :n_response] = np.where(mask_R, weight, 0.0)
        self.policy_versions[row, :n_response] = np.where(mask_R, sample.policy_versions_T[cut:], -1)
        self.sample_index[row] = index
        spans = tuple((s.start, s.end, s.call_seq, s.policy_version) for s in sample.spans)
        self.provenance[row] = (sample.rollout_id, sample.group_id, tuple(sample.call_seqs), spans)

    def put_filler(self, row: int) -> None:
        """Two pad tokens (one prompt, one response), nothing trainable."""
        self.prompt_mask[row, -1] = 1
        self.response_attention[row, 0] = 1

    def freeze(self, dp_size: int, trainable_tokens: int, temperature: float) -> VerlRows:
        attention_mask = np.concatenate([self.prompt_mask, self.response_attention], axis=1)
        position_ids = np.clip(np.cumsum(attention_mask, axis=1) - 1, 0, None) * attention_mask
        columns = list(zip(*self.provenance, strict=True)) if self.provenance else [(), (), (), ()]
        return VerlRows(
            prompts=self.prompts,
            responses=self.responses,
            input_ids=np.concatenate([self.prompts, self.responses], axis=1),
            attention_mask=attention_mask,
            position_ids=position_ids,
            response_mask=self.response_mask,
            old_log_probs=self.old_log_probs,
            advantages=self.advantages,
            token_weights=self.token_weights,
            policy_versions=self.policy_versions,
            sample_index=self.sample_index,
            rollout_id=_objects(columns[0]),
            group_id=_objects(columns[1]),
            call_seqs=_objects(columns[2]),
            spans=_objects(columns[3]),
            dp_size=dp_size,
            trainable_tokens=trainable_tokens,
            temperature=temperature,
        )


def with_recomputed_logprobs(rows: VerlRows, recomputed: np.ndarray) -> VerlRows:
    """Decoupled PPO: `rows` whose `old_log_probs` are the trainer's recomputed logprobs (`recomputed`, [B, R] over
    the response region, e.g. verl's forward-only output through `no_padding_2_padding`; 0 off trainable tokens) and
    whose `rollout_log_probs` are the recorded ones. ValueError when the shape is not the rows' response region, a
    trainable token's recomputation is not finite, or the rows already carry a recomputation."""
    if rows.rollout_log_probs is not None:
        raise ValueError(
            "the rows already carry recomputed logprobs (rollout_log_probs is set); recompute from the rows "
            "to_verl_rows built, once per step"
        )
    recomputed = np.asarray(recomputed)
    expected = rows.response_mask.shape
    if recomputed.shape != expected:
        raise ValueError(
            f"recomputed logprobs have shape {tuple(recomputed.shape)} but the update's rows have "
            f"{expected[0]} rows x {expected[1]} response columns {tuple(expected)}; the forward pass must return "
            "one logprob per response-region token of every row (fillers included), in the rows' order"
        )
    mask = rows.response_mask == 1
    bad = np.argwhere(mask & ~np.isfinite(recomputed))
    if bad.size:
        row, column = (int(v) for v in bad[0])
        raise ValueError(
            f"recomputed logprobs are not finite on {len(bad)} trainable token(s), first at row {row} (rollout "
            f"{rows.rollout_id[row]!r}) response column {column}: {recomputed[row, column]}; check the model's "
            "dtype and the rows' temperature"
        )
    proximal = np.where(mask, recomputed, 0.0).astype(np.float32)
    return replace(rows, old_log_probs=proximal, rollout_log_probs=rows.old_log_probs)


def _objects(values: Sequence[object]) -> np.ndarray:
    """A 1-D object array (np.array would turn equal-length tuples into a 2-D array)."""
    array = np.empty(len(values), dtype=object)
    array[:] = list(values)
    return array


def samples_from_rows(rows: VerlRows) -> list[Sample]:
    """The samples a VerlRows holds (fillers left out), rebuilt from its token fields (the recorded logprobs, also of
    decoupled rows), provenance and temperature."""
    samples = []
    for row in range(rows.num_rows):
        if int(rows.sample_index[row]) == FILLER_SAMPLE_INDEX:
            continue
        prompt = rows.prompts[row][rows.attention_mask[row, : rows.prompts.shape[1]] == 1]
        n_response = int(rows.attention_mask[row, rows.prompts.shape[1] :].sum())
        cut = prompt.shape[0]
        token_ids_T = np.concatenate([prompt, rows.responses[row, :n_response]])
        loss_mask_T = np.concatenate([np.zeros(cut, dtype=bool), rows.response_mask[row, :n_response] == 1])
        logprobs_T = np.concatenate([np.zeros(cut, np.float32), rows.recorded_log_probs[row, :n_response]])
        versions_T = np.concatenate([np.full(cut, -1, np.int64), rows.policy_versions[row, :n_response]])
        for array in (token_ids_T, loss_mask_T, logprobs_T, versions_T):
            array.flags.writeable = False
        spans = tuple(TrainableSpan(*span) for span in rows.spans[row])
        samples.append(
            Sample(
                str(rows.rollout_id[row]),
                str(rows.group_id[row]),
                tuple(rows.call_seqs[row]),
                spans,
                token_ids_T,
                loss_mask_T,
                logprobs_T,
                versions_T,
                SamplingParams(temperature=rows.temperature),
            )
        )
    return samples
