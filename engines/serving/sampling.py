"""Token sampling math: temperature, top-k / min-p / top-p filtering, per-row seeded draws, and the logprobs reported.

A row samples from its processed distribution: softmax(logits / T) restricted to the tokens top-k, min-p and top-p
keep, renormalised (vLLM's order and semantics; min-p compares with the most likely token, so it commutes with
top-k). The logprobs reported are, by the engine's `logprobs_mode`:
- `processed` (default): of that same distribution, for the sampled token and the top alternatives (a token outside
  the kept set has logprob -inf, reported as `REPORTED_LOGPROB_FLOOR` as vLLM does); a greedy row (T = 0) reports the
  raw distribution's, as vLLM's `processed_logprobs` does (its greedy rows are not divided by a temperature or
  filtered);
- `raw`: of the model's raw distribution (before temperature and filtering), vLLM's default `raw_logprobs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

GREEDY_TEMPERATURE = 0.0
LogprobsMode = Literal["processed", "raw"]
LOGPROBS_MODES: tuple[LogprobsMode, ...] = ("processed", "raw")
REPORTED_LOGPROB_FLOOR = -9999.0
"""Logprobs are reported no lower than this (vLLM's floor): a filtered-out alternative's -inf is not valid JSON."""


@dataclass(frozen=True)
class RowSampling:
    """How one row (one choice of one request) draws its next token."""

    temperature: float
    """0 means greedy (argmax); otherwise logits are divided by it."""
    top_p: float
    """Nucleus mass kept, in (0, 1]; 1 disables the filter."""
    top_k: int
    """Number of most likely tokens kept; 0 or less disables the filter."""
    min_p: float = 0.0
    """Tokens kept when their probability is at least min_p times the most likely one's; 0 disables the filter."""


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


def min_p_keep_V(scaled_V: torch.Tensor, min_p: float) -> torch.Tensor:
    """Mask of the tokens whose probability is at least `min_p` times the most likely one's (all when `min_p` <= 0)."""
    if min_p <= 0.0:
        return torch.ones_like(scaled_V, dtype=torch.bool)
    return scaled_V - scaled_V.max() >= torch.log(torch.tensor(min_p, dtype=scaled_V.dtype))


def processed_logits_V(logits_V: torch.Tensor, row: RowSampling) -> torch.Tensor:
    """A non-greedy row's logits / temperature in float32, -inf outside the tokens top-k, min-p and top-p keep."""
    scaled_V = logits_V.float() / row.temperature
    keep_V = top_k_keep_V(scaled_V, row.top_k) & min_p_keep_V(scaled_V, row.min_p)
    scaled_V = scaled_V.masked_fill(~keep_V, float("-inf"))
    if row.top_p < 1.0:
        scaled_V = scaled_V.masked_fill(~top_p_keep_V(torch.softmax(scaled_V, dim=-1), row.top_p), float("-inf"))
    return scaled_V


def sampling_probs_V(logits_V: torch.Tensor, row: RowSampling) -> torch.Tensor:
    """The distribution a non-greedy row samples from: temperature, then top-k and min-p, then top-p, renormalised."""
    return torch.softmax(processed_logits_V(logits_V, row), dim=-1)


def sample_step(logits_BV: torch.Tensor, rows: list[RowSampling], generators: list[torch.Generator | None],
                logprobs_mode: LogprobsMode = "processed") -> tuple[torch.Tensor, torch.Tensor]:
    """(next token per row, the logprobs to report per row over the vocabulary): greedy rows take the argmax and
    report raw logprobs; sampled rows draw from their processed distribution with their own generator and report
    its logprobs (`processed`) or the raw ones (`raw`)."""
    if len(rows) != logits_BV.shape[0] or len(generators) != len(rows):
        raise ValueError(f"got {logits_BV.shape[0]} logit rows, {len(rows)} sampling rows and "
                         f"{len(generators)} generators; pass one of each per batch row")
    if logprobs_mode not in LOGPROBS_MODES:
        raise ValueError(f"logprobs_mode={logprobs_mode!r}; use one of {LOGPROBS_MODES}")
    tokens_B = torch.argmax(logits_BV, dim=-1)
    logprobs_BV = raw_logprobs_BV(logits_BV)
    for b, row in enumerate(rows):
        if row.temperature > GREEDY_TEMPERATURE:
            processed_V = processed_logits_V(logits_BV[b], row)
            tokens_B[b] = inverse_cdf_draw(torch.softmax(processed_V, dim=-1), generators[b])
            if logprobs_mode == "processed":
                logprobs_BV[b] = torch.log_softmax(processed_V, dim=-1)
    return tokens_B, logprobs_BV


def sample_tokens_B(logits_BV: torch.Tensor, rows: list[RowSampling],
                    generators: list[torch.Generator | None]) -> torch.Tensor:
    """Next token per row: argmax for greedy rows, else a draw from the row's own generator."""
    return sample_step(logits_BV, rows, generators)[0]


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
