"""Logprobs and entropies of the distribution a token was sampled from: temperature, top-k, min-p, top-p.

The engine draws from softmax(logits / T) restricted to a kept set and renormalised, and reports the logprob of that
processed distribution (`trainer.sampling`). The trainer scores targets the same way, per target:

1. scaled = logits / T;
2. top-k: keep the tokens whose scaled logit is at least the k-th largest (ties at the threshold kept);
3. min-p: keep the tokens whose probability is at least min_p times the largest's (scaled logit at least the
   largest + log(min_p));
4. top-p: over the softmax of what is kept, sorted by probability, keep the tokens whose mass before them is below
   top_p (the most likely always kept);
5. the target is always kept (it was sampled, so it was in the engine's set; a lagging or numerically different
   trainer may otherwise exclude it and get -inf).

The kept set is a mask computed without gradient; the renormalisation over it (a masked log-sum-exp of the scaled
logits) is differentiable. These are the embedded engine's semantics (`engines/serving/sampling.py`,
`processed_logits_V`: temperature, top-k and min-p, then top-p) and vLLM's (temperature, min-p, then top-k and top-p:
min-p and top-k commute, both being relative to the most likely token); `tests/trainer/test_sampling_filter.py`
checks the engine and this module agree on a table of cases. Targets whose parameters are all neutral cost the
plain log-softmax.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from trainer.sampling import SamplingParams

MASK_ROWS_PER_CHUNK = 256
"""Targets whose kept sets are computed together: top-p sorts [rows, vocab] (values and int64 indices), so chunks
bound that scratch memory to a few of the logits' rows whatever the micro-batch size."""


@dataclass(frozen=True)
class TargetSampling:
    """Per-target sampling parameters of a micro-batch's N targets."""

    temperature_N: torch.Tensor
    """Temperature (float32, > 0)."""
    top_p_N: torch.Tensor
    """Nucleus mass (float32, 1: off)."""
    top_k_N: torch.Tensor
    """Top-k (int64, 0: off)."""
    min_p_N: torch.Tensor
    """Min-p (float32, 0: off)."""

    @classmethod
    def from_params(cls, params: Sequence[SamplingParams], counts: Sequence[int]) -> TargetSampling | None:
        """Each of `params` repeated `counts` times; None when every one is plain (the fast path)."""
        for p, n in zip(params, counts, strict=True):
            if n and not p.trainable:
                raise ValueError(
                    f"{n} trainable tokens were sampled from a distribution the trainer does not recompute "
                    f"({p.describe()}); such calls are masked when samples are built (trainer.sample_masks): build "
                    "samples with trainer.samples.build_samples"
                )
        if all(p.plain for p, n in zip(params, counts, strict=True) if n):
            return None
        repeats = torch.tensor(list(counts), dtype=torch.int64)

        def column(values: list[float], dtype: torch.dtype) -> torch.Tensor:
            return torch.repeat_interleave(torch.tensor(values, dtype=dtype), repeats)

        return cls(
            temperature_N=column([p.temperature for p in params], torch.float32),
            top_p_N=column([p.top_p for p in params], torch.float32),
            top_k_N=column([p.top_k for p in params], torch.int64),
            min_p_N=column([p.min_p for p in params], torch.float32),
        )


    def rows(self, start: int, stop: int) -> TargetSampling:
        """The parameters of targets start..stop."""
        return TargetSampling(self.temperature_N[start:stop], self.top_p_N[start:stop], self.top_k_N[start:stop],
                              self.min_p_N[start:stop])


@torch.no_grad()
def kept_mask_NV(scaled_NV: torch.Tensor, sampling: TargetSampling, targets_N: torch.Tensor) -> torch.Tensor:
    """The tokens each target's filters keep, given the temperature-scaled logits (targets always kept)."""
    scaled_NV = scaled_NV.detach().float()
    chunk = MASK_ROWS_PER_CHUNK
    if scaled_NV.shape[0] <= chunk:
        return _kept_mask(scaled_NV, sampling, targets_N)
    return torch.cat([_kept_mask(scaled_NV[i : i + chunk], sampling.rows(i, i + chunk), targets_N[i : i + chunk])
                      for i in range(0, scaled_NV.shape[0], chunk)])


def _kept_mask(scaled_NV: torch.Tensor, sampling: TargetSampling, targets_N: torch.Tensor) -> torch.Tensor:
    n, vocab = scaled_NV.shape
    keep_NV = torch.ones_like(scaled_NV, dtype=torch.bool)
    top_k_N = sampling.top_k_N
    k_rows = ((top_k_N > 0) & (top_k_N < vocab)).nonzero().squeeze(-1)
    if k_rows.numel():
        k_R = top_k_N[k_rows]
        top_RK = torch.topk(scaled_NV[k_rows], int(k_R.max())).values
        threshold_R = top_RK.gather(-1, (k_R - 1)[:, None])
        keep_NV[k_rows] = scaled_NV[k_rows] >= threshold_R
    m_rows = (sampling.min_p_N > 0).nonzero().squeeze(-1)
    if m_rows.numel():
        scaled_RV = scaled_NV[m_rows]
        log_min_p_R = torch.log(sampling.min_p_N[m_rows])
        keep_NV[m_rows] &= scaled_RV - scaled_RV.max(dim=-1, keepdim=True).values >= log_min_p_R[:, None]
    p_rows = (sampling.top_p_N < 1).nonzero().squeeze(-1)
    if p_rows.numel():
        keep_NV[p_rows] &= _top_p_keep(scaled_NV[p_rows], keep_NV[p_rows], sampling.top_p_N[p_rows])
    keep_NV[torch.arange(n), targets_N] = True
    return keep_NV


def _top_p_keep(scaled_RV: torch.Tensor, keep_RV: torch.Tensor, top_p_R: torch.Tensor) -> torch.Tensor:
    """The most likely tokens of the softmax over what `keep_RV` holds whose mass before them is below top-p."""
    probs_RV = torch.softmax(scaled_RV.masked_fill(~keep_RV, float("-inf")), dim=-1)
    sorted_RV, order_RV = torch.sort(probs_RV, dim=-1, descending=True)
    mass_before_RV = torch.cumsum(sorted_RV, dim=-1) - sorted_RV
    keep_sorted_RV = mass_before_RV < top_p_R[:, None]
    keep_sorted_RV[:, 0] = True
    return torch.zeros_like(keep_sorted_RV).scatter(-1, order_RV, keep_sorted_RV)


def sampled_logprobs(
    logits_NV: torch.Tensor, targets_N: torch.Tensor, sampling: TargetSampling | None, *, entropy_grad: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprob of each target, entropy of its distribution) under the processed distribution it was sampled from
    (the model's own when `sampling` is None). Logprobs are differentiable; entropies only when `entropy_grad`."""
    logits_NV = logits_NV.float()
    keep_NV = None
    if sampling is not None:
        logits_NV = logits_NV / sampling.temperature_N[:, None]
        if bool(((sampling.top_k_N > 0) | (sampling.top_p_N < 1) | (sampling.min_p_N > 0)).any()):
            keep_NV = kept_mask_NV(logits_NV, sampling, targets_N)
            logits_NV = logits_NV.masked_fill(~keep_NV, float("-inf"))
    normalizer_N = torch.logsumexp(logits_NV, dim=-1)
    logprobs_N = logits_NV.gather(-1, targets_N[:, None]).squeeze(-1) - normalizer_N
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        probs_NV = torch.softmax(logits_NV, dim=-1)
        if keep_NV is not None:
            logits_NV = logits_NV.masked_fill(~keep_NV, 0.0)
        entropy_N = normalizer_N - (probs_NV * logits_NV).sum(dim=-1)
    return logprobs_N, entropy_N
