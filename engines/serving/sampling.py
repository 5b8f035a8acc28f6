"""Token sampling math: raw log-probabilities, temperature, top-k/top-p filtering and per-row seeded draws.

Logprobs are always those of the model's raw distribution (before temperature and filtering), as vLLM reports
them by default; sampling uses the processed distribution.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

GREEDY_TEMPERATURE = 0.0


@dataclass(frozen=True)
class RowSampling:
    """How one row (one choice of one request) draws its next token."""

    temperature: float
    """0 means greedy (argmax); otherwise logits are divided by it."""
    top_p: float
    """Nucleus mass kept, in (0, 1]; 1 disables the filter."""
    top_k: int
    """Number of most likely tokens kept; 0 or less disables the filter."""


def raw_logprobs_BV(logits_BV: torch.Tensor) -> torch.Tensor:
    """Log-softmax over the vocabulary in float32: the logprobs reported to clients."""
    return torch.log_softmax(logits_BV.float(), dim=-1)


def top_p_keep_V(probs_V: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask of the smallest set of most likely tokens whose mass reaches `top_p` (at least one)."""
    if top_p >= 1.0:
        return torch.ones_like(probs_V, dtype=torch.bool)
    sorted_probs_V, order_V = torch.sort(probs_V, descending=True)
    mass_before_V = torch.cumsum(sorted_probs_V, dim=-1) - sorted_probs_V
    keep_sorted_V = mass_before_V < top_p
    keep_sorted_V[0] = True
    keep_V = torch.zeros_like(keep_sorted_V)
    keep_V[order_V] = keep_sorted_V
    return keep_V


def top_k_keep_V(logits_V: torch.Tensor, top_k: int) -> torch.Tensor:
    """Mask of the `top_k` highest logits (all tokens when `top_k` <= 0 or exceeds the vocabulary)."""
    if top_k <= 0 or top_k >= logits_V.shape[-1]:
        return torch.ones_like(logits_V, dtype=torch.bool)
    threshold = torch.topk(logits_V, top_k).values[-1]
    return logits_V >= threshold


def sampling_probs_V(logits_V: torch.Tensor, row: RowSampling) -> torch.Tensor:
    """The distribution a non-greedy row samples from: temperature, then top-k, then top-p, renormalised."""
    scaled_V = logits_V.float() / row.temperature
    scaled_V = scaled_V.masked_fill(~top_k_keep_V(scaled_V, row.top_k), float("-inf"))
    probs_V = torch.softmax(scaled_V, dim=-1)
    probs_V = probs_V * top_p_keep_V(probs_V, row.top_p)
    return probs_V / probs_V.sum()


def sample_tokens_B(logits_BV: torch.Tensor, rows: list[RowSampling],
                    generators: list[torch.Generator | None]) -> torch.Tensor:
    """Next token per row: argmax for greedy rows, else a draw from the row's own generator."""
    if len(rows) != logits_BV.shape[0] or len(generators) != len(rows):
        raise ValueError(f"got {logits_BV.shape[0]} logit rows, {len(rows)} sampling rows and "
                         f"{len(generators)} generators; pass one of each per batch row")
    tokens_B = torch.argmax(logits_BV, dim=-1)
    for b, row in enumerate(rows):
        if row.temperature > GREEDY_TEMPERATURE:
            probs_V = sampling_probs_V(logits_BV[b], row)
            tokens_B[b] = inverse_cdf_draw(probs_V, generators[b])
    return tokens_B


def inverse_cdf_draw(probs_V: torch.Tensor, generator: torch.Generator | None) -> int:
    """One draw from `probs_V` using a single uniform number (far cheaper than multinomial on a big vocab)."""
    cdf_V = torch.cumsum(probs_V.double(), dim=-1)
    uniform = torch.rand((), generator=generator, dtype=torch.float64) * cdf_V[-1]
    index = int(torch.searchsorted(cdf_V, uniform, right=True))
    return min(index, probs_V.shape[-1] - 1)


def top_logprobs_BK(logprobs_BV: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The `k` best (logprob, token id) pairs per row, best first; empty tensors when k is 0."""
    values_BK, ids_BK = torch.topk(logprobs_BV, k, dim=-1) if k > 0 else (
        logprobs_BV[:, :0], torch.zeros_like(logprobs_BV[:, :0], dtype=torch.long))
    return values_BK, ids_BK


def row_generator(seed: int | None, choice_index: int) -> torch.Generator:
    """A CPU generator for one choice: reproducible from (seed, choice) when a seed is given, else random."""
    generator = torch.Generator(device="cpu")
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed((seed * 1_000_003 + choice_index) % (2**63))
    return generator
