"""Engine-trainer mismatch and ratio statistics by policy lag (`off_policy/...` metrics), from per-token logprobs.

A token's lag is the trainer's policy version minus the version that sampled it. At lag 0 the engine and the
trainer hold the same weights, so any difference between the engine's recorded logprob and the trainer's is
numeric mismatch (bf16 inference, kernels, sampling transforms); at lag k > 0 it is staleness plus mismatch.
For each lag k seen, with r = pi_trainer / pi_behav of each token (trainer logprobs at the step's starting weights):

- `off_policy/lag{k}_tokens`: tokens measured;
- `off_policy/lag{k}_abs_diff_mean`, `..._abs_diff_max`: mean and max |log pi_trainer - log pi_behav|;
- `off_policy/lag{k}_k3`: mean of r - log r - 1, the k3 estimate of KL(pi_behav || pi_trainer) (tokens were sampled
  from pi_behav; verl's low_var_kl direction, as `loss/approx_kl_k3`);
- `off_policy/lag{k}_ratio_mean`, `..._ratio_min`, `..._ratio_max`.

Lags of LAG_BUCKETS - 1 and more share the last bucket (`lag7` holds lags >= 7). Workers and micro-batches produce
*raw* values (sums, minima, maxima; `raw_terms`) that combine with `merge_raw` (or
verl's SUM/MIN/MAX metric aggregation, `RAW_AGGREGATION`); `finish` turns them into the metrics above.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Literal, Protocol

import numpy as np
import torch

PREFIX = "off_policy/"
LAG_BUCKETS = 8
"""Lags 0 .. LAG_BUCKETS - 2 have their own statistics; larger lags share the last bucket."""
LOG_RATIO_LIMIT = 20.0
Aggregation = Literal["sum", "min", "max"]
RAW_AGGREGATION: dict[str, Aggregation] = {
    "tokens": "sum",
    "abs_diff_sum": "sum",
    "abs_diff_max": "max",
    "k3_sum": "sum",
    "ratio_sum": "sum",
    "ratio_min": "min",
    "ratio_max": "max",
}
"""How each raw statistic of a lag combines across micro-batches and ranks."""
_RAW_KEY = re.compile(r"^off_policy/lag(\d+)_(\w+)$")


class TargetSequence(Protocol):
    """What the layout of trainable tokens needs from a sequence (a `trainer.samples.Sample` is one)."""

    @property
    def loss_mask_T(self) -> np.ndarray: ...

    @property
    def policy_versions_T(self) -> np.ndarray: ...


def target_layout(sequences: Sequence[TargetSequence]) -> tuple[torch.Tensor, torch.Tensor]:
    """Policy version and sequence index of every trainable token, sequences concatenated in order."""
    versions, ids = [], []
    for index, seq in enumerate(sequences):
        mask = np.asarray(seq.loss_mask_T, dtype=bool)
        versions.append(np.asarray(seq.policy_versions_T, dtype=np.int64)[mask])
        ids.append(np.full(int(mask.sum()), index, dtype=np.int64))
    if not versions:
        return torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)
    return torch.from_numpy(np.concatenate(versions)), torch.from_numpy(np.concatenate(ids))


def raw_key(lag: int, stat: str) -> str:
    """The raw metric key of one statistic of one lag."""
    return f"{PREFIX}lag{lag}_{stat}"


def raw_terms(
    trainer_N: torch.Tensor, behaviour_N: torch.Tensor, lag_N: torch.Tensor, *, every_bucket: bool = False
) -> dict[str, float]:
    """Raw statistics of one micro-batch's trainable tokens, by lag (negative lags are refused).

    `every_bucket`: also the lags without tokens (0 tokens, +inf minimum, -inf maximum), so every micro-batch on every
    rank reports the same keys (verl aggregates metrics key by key across ranks)."""
    with torch.no_grad():
        trainer_N, behaviour_N = trainer_N.detach().double().cpu(), behaviour_N.detach().double().cpu()
        lag_N = lag_N.detach().cpu().long()
        if trainer_N.shape != behaviour_N.shape or trainer_N.shape != lag_N.shape:
            raise ValueError(
                f"off-policy metrics got {tuple(trainer_N.shape)} trainer logprobs, {tuple(behaviour_N.shape)} "
                f"behaviour logprobs and {tuple(lag_N.shape)} lags; pass one of each per trainable token"
            )
        if lag_N.numel() and int(lag_N.min()) < 0:
            raise ValueError(
                f"a token was sampled by policy version {-int(lag_N.min())} versions ahead of the trainer; pass "
                "lag = trainer version - the token's policy version, measured before the update"
            )
        log_ratio_N = (trainer_N - behaviour_N).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
        ratio_N = torch.exp(log_ratio_N)
        k3_N = ratio_N - log_ratio_N - 1.0
        abs_N = (trainer_N - behaviour_N).abs()
        lag_N = lag_N.clamp(max=LAG_BUCKETS - 1)
        raw: dict[str, float] = {}
        for lag in range(LAG_BUCKETS) if every_bucket else sorted(set(lag_N.tolist())):
            at = lag_N == lag
            if not bool(at.any()):
                raw.update(_empty_bucket(lag))
                continue
            raw[raw_key(lag, "tokens")] = float(at.sum())
            raw[raw_key(lag, "abs_diff_sum")] = float(abs_N[at].sum())
            raw[raw_key(lag, "abs_diff_max")] = float(abs_N[at].max())
            raw[raw_key(lag, "k3_sum")] = float(k3_N[at].sum())
            raw[raw_key(lag, "ratio_sum")] = float(ratio_N[at].sum())
            raw[raw_key(lag, "ratio_min")] = float(ratio_N[at].min())
            raw[raw_key(lag, "ratio_max")] = float(ratio_N[at].max())
        return raw


def _empty_bucket(lag: int) -> dict[str, float]:
    """Raw statistics of a lag without tokens (neutral under sum, min and max)."""
    neutral = {"sum": 0.0, "min": math.inf, "max": -math.inf}
    return {raw_key(lag, stat): neutral[how] for stat, how in RAW_AGGREGATION.items()}


def aggregation_of(key: str) -> Aggregation:
    """How a raw key combines (sum, min or max)."""
    match = _RAW_KEY.match(key)
    if match is None or match.group(2) not in RAW_AGGREGATION:
        raise ValueError(f"{key!r} is not a raw off-policy statistic; raw keys look like {raw_key(0, 'tokens')!r}")
    return RAW_AGGREGATION[match.group(2)]


def merge_raw(parts: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Raw statistics of several micro-batches combined (sums added, extrema kept)."""
    merged: dict[str, float] = {}
    for part in parts:
        for key, value in part.items():
            if key not in merged:
                merged[key] = value
                continue
            how = aggregation_of(key)
            merged[key] = merged[key] + value if how == "sum" else (min if how == "min" else max)(merged[key], value)
    return merged


def finish(raw: Mapping[str, float]) -> dict[str, float]:
    """The `off_policy/lag{k}_...` metrics from combined raw statistics (means from sums)."""
    lags = sorted({int(m.group(1)) for key in raw if (m := _RAW_KEY.match(key))})
    metrics: dict[str, float] = {}
    for lag in lags:
        tokens = raw.get(raw_key(lag, "tokens"), 0.0)
        if tokens <= 0:
            continue
        metrics[raw_key(lag, "tokens")] = tokens
        metrics[raw_key(lag, "abs_diff_mean")] = raw[raw_key(lag, "abs_diff_sum")] / tokens
        metrics[raw_key(lag, "abs_diff_max")] = raw[raw_key(lag, "abs_diff_max")]
        metrics[raw_key(lag, "k3")] = raw[raw_key(lag, "k3_sum")] / tokens
        metrics[raw_key(lag, "ratio_mean")] = raw[raw_key(lag, "ratio_sum")] / tokens
        metrics[raw_key(lag, "ratio_min")] = raw[raw_key(lag, "ratio_min")]
        metrics[raw_key(lag, "ratio_max")] = raw[raw_key(lag, "ratio_max")]
    return metrics


def measured_fraction(raw: Mapping[str, float], trainable_tokens: float) -> dict[str, float]:
    """`off_policy/measured_token_fraction`: the share of the step's trainable tokens the statistics cover."""
    measured = sum(value for key, value in raw.items() if key.endswith("_tokens") and _RAW_KEY.match(key))
    fraction = measured / trainable_tokens if trainable_tokens > 0 else math.nan
    return {f"{PREFIX}measured_token_fraction": fraction}


class OffPolicyMeter:
    """Collects the raw statistics of one training step (trainer version fixed at the step's start)."""

    def __init__(self, trainer_version: int) -> None:
        self.trainer_version = trainer_version
        self.parts: list[dict[str, float]] = []

    def add(self, trainer_N: torch.Tensor, behaviour_N: torch.Tensor, versions_N: torch.Tensor | None) -> None:
        """Measures one micro-batch's trainable tokens (`versions_N`: the policy version that sampled each)."""
        if versions_N is None:
            raise ValueError("off-policy metrics need each token's policy version; set LossBatch.policy_versions_T")
        self.parts.append(raw_terms(trainer_N, behaviour_N, self.trainer_version - versions_N.long()))

    def metrics(self, trainable_tokens: float) -> dict[str, float]:
        """The step's `off_policy/...` metrics (none when nothing was measured)."""
        raw = merge_raw(self.parts)
        if not raw:
            return {}
        return {**finish(raw), **measured_fraction(raw, trainable_tokens)}
