"""The running batch's tensors: a left-padded KV cache with attention mask and per-row positions.

Rows join by prefilling their prompts (left padded) and merging caches on a shared time axis; rows leave by
selecting the survivors and trimming time columns that are padding for every row. Every forward pass passes an
explicit 2-D attention mask and explicit position ids, so a row's numbers do not depend on its neighbours.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from engines.hf_cache import forward_with_cache


@dataclass
class KVBatch:
    """Cache and masks of the rows currently decoding, in batch order."""

    cache: DynamicCache
    """transformers cache; per decoder layer keys and values of shape [B, H, T, D]."""
    mask_BT: torch.Tensor
    """1 for real cached tokens, 0 for left padding (long)."""
    positions_B: torch.Tensor
    """Position id of each row's next token = number of real tokens cached (long)."""

    @property
    def size(self) -> int:
        """Number of rows."""
        return int(self.mask_BT.shape[0])


def _cache_layers(cache: DynamicCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) per layer of a transformers dynamic cache."""
    return [(layer.keys, layer.values) for layer in cache.layers]


@torch.inference_mode()
def prefill(model: torch.nn.Module, prompts: list[list[int]], pad_id: int) -> tuple[KVBatch, torch.Tensor]:
    """Runs the prompts (left padded) through the model; returns their cache and last logits [B, V]."""
    length = max(len(p) for p in prompts)
    ids_BT = torch.full((len(prompts), length), pad_id, dtype=torch.long)
    mask_BT = torch.zeros((len(prompts), length), dtype=torch.long)
    for b, prompt in enumerate(prompts):
        ids_BT[b, length - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
        mask_BT[b, length - len(prompt):] = 1
    positions_BT = (torch.cumsum(mask_BT, dim=-1) - 1).clamp(min=0)
    cache = DynamicCache(config=model.config)
    out = forward_with_cache(model, cache, input_ids=ids_BT, attention_mask=mask_BT, position_ids=positions_BT,
                   logits_to_keep=1)
    batch = KVBatch(cache, mask_BT, mask_BT.sum(dim=-1))
    return batch, out.logits[:, -1, :]


@torch.inference_mode()
def prefill_after(model: torch.nn.Module, prompt: list[int],
                  prefix: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[KVBatch, torch.Tensor]:
    """One row whose first positions' KV is `prefix` (per layer [1, H, P, D], P < len(prompt)): runs only the rest of
    the prompt; returns its cache (all len(prompt) positions) and last logits [1, V]."""
    done = int(prefix[0][0].shape[2])
    if not 0 < done < len(prompt):
        raise ValueError(f"prefill_after: a prefix of {done} positions for a prompt of {len(prompt)} tokens; "
                         "it must leave at least one prompt token to run")
    cache = _rebuild([(k.clone(), v.clone()) for k, v in prefix])
    mask_BT = torch.ones((1, len(prompt)), dtype=torch.long)
    ids_BT = torch.tensor([prompt[done:]], dtype=torch.long)
    positions_BT = torch.arange(done, len(prompt), dtype=torch.long)[None, :]
    out = forward_with_cache(model, cache, input_ids=ids_BT, attention_mask=mask_BT, position_ids=positions_BT,
                   logits_to_keep=1)
    return KVBatch(cache, mask_BT, torch.tensor([len(prompt)], dtype=torch.long)), out.logits[:, -1, :]


def row_layers(batch: KVBatch, row: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One row's cached KV without its left padding (per layer [1, H, T, D], T = its real tokens), copied."""
    length = int(batch.positions_B[row])
    return [(k[row:row + 1, :, k.shape[2] - length:].clone(), v[row:row + 1, :, v.shape[2] - length:].clone())
            for k, v in _cache_layers(batch.cache)]


@torch.inference_mode()
def decode_step(model: torch.nn.Module, batch: KVBatch, next_ids_B: torch.Tensor) -> torch.Tensor:
    """Feeds one token per row, growing the cache in place; returns the next-token logits [B, V]."""
    mask_BT = torch.cat([batch.mask_BT, torch.ones((batch.size, 1), dtype=torch.long)], dim=-1)
    out = forward_with_cache(model, batch.cache, input_ids=next_ids_B[:, None], attention_mask=mask_BT,
                   position_ids=batch.positions_B[:, None])
    batch.mask_BT = mask_BT
    batch.positions_B = batch.positions_B + 1
    return out.logits[:, -1, :]


def _left_pad_T(tensor: torch.Tensor, columns: int, time_dim: int) -> torch.Tensor:
    """Prepends `columns` zero columns along `time_dim`."""
    if columns == 0:
        return tensor
    shape = list(tensor.shape)
    shape[time_dim] = columns
    return torch.cat([tensor.new_zeros(shape), tensor], dim=time_dim)


def _rebuild(layers: list[tuple[torch.Tensor, torch.Tensor]]) -> DynamicCache:
    """A dynamic cache holding the given per-layer (keys, values)."""
    return DynamicCache(ddp_cache_data=layers)


def merge(first: KVBatch | None, second: KVBatch) -> KVBatch:
    """Concatenates two batches (first's rows, then second's), left padding the shorter time axis."""
    if first is None or first.size == 0:
        return second
    length = max(first.mask_BT.shape[1], second.mask_BT.shape[1])
    pad_a, pad_b = length - first.mask_BT.shape[1], length - second.mask_BT.shape[1]
    layers = [
        (torch.cat([_left_pad_T(ka, pad_a, 2), _left_pad_T(kb, pad_b, 2)]),
         torch.cat([_left_pad_T(va, pad_a, 2), _left_pad_T(vb, pad_b, 2)]))
        for (ka, va), (kb, vb) in zip(_cache_layers(first.cache), _cache_layers(second.cache), strict=True)
    ]
    mask_BT = torch.cat([_left_pad_T(first.mask_BT, pad_a, 1), _left_pad_T(second.mask_BT, pad_b, 1)])
    return KVBatch(_rebuild(layers), mask_BT, torch.cat([first.positions_B, second.positions_B]))


def select(batch: KVBatch, keep_rows: list[int]) -> KVBatch | None:
    """Keeps `keep_rows` (in that order) and drops leading time columns that are padding for all of them."""
    if not keep_rows:
        return None
    index_B = torch.tensor(keep_rows, dtype=torch.long)
    mask_BT = batch.mask_BT.index_select(0, index_B)
    first_real = int(torch.nonzero(mask_BT.any(dim=0))[0, 0])
    layers = [(k.index_select(0, index_B)[:, :, first_real:], v.index_select(0, index_B)[:, :, first_real:])
              for k, v in _cache_layers(batch.cache)]
    return KVBatch(_rebuild(layers), mask_BT[:, first_real:], batch.positions_B.index_select(0, index_B))
