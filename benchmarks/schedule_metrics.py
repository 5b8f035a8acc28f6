"""Pure measurements of one schedule's run: busy/idle time of the training devices, staleness, duration statistics.

Idle share: the share of the run's wall-clock window (first submit to the end of the last update) during which the
devices did nothing, i.e. neither a collocated update (pause, drain, sleep, train, checkpoint, refit, wake, resume)
ran nor any call was inside the engine. A call occupies [arrival at the gateway, answer complete]; a call the gateway
held during an update lies inside that update's interval, so it is not counted twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from gateway.records import CallRecord

Interval = tuple[float, float]


def union_length_s(intervals: Iterable[Interval], start_s: float, end_s: float) -> float:
    """Length of the union of `intervals`, clipped to [start_s, end_s]."""
    clipped = sorted((max(a, start_s), min(b, end_s)) for a, b in intervals if b > start_s and a < end_s)
    total, reach = 0.0, start_s
    for a, b in clipped:
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def call_intervals(calls: Iterable[CallRecord]) -> list[Interval]:
    """[arrival, answer complete] of each recorded call, unix seconds."""
    return [(c.created_at, c.created_at + c.latency_ms / 1000.0) for c in calls]


def device_shares(updates: Sequence[Interval], calls: Sequence[Interval], start_s: float,
                  end_s: float) -> dict[str, float]:
    """Shares of the window spent updating, generating only (no update running) and idle."""
    wall_s = end_s - start_s
    update_s = union_length_s(updates, start_s, end_s)
    busy_s = union_length_s([*updates, *calls], start_s, end_s)
    return {"update_share": update_s / wall_s, "generating_share": (busy_s - update_s) / wall_s,
            "idle_share": 1.0 - busy_s / wall_s}


def lag_summary(lags: Sequence[int]) -> dict[str, object]:
    """Histogram, mean and max of rollout lags."""
    counts = Counter(lags)
    return {"histogram": {str(k): counts[k] for k in sorted(counts)},
            "mean": float(np.mean(lags)) if lags else 0.0, "max": max(lags, default=0)}


def spread_summary(values_s: Sequence[float]) -> dict[str, float]:
    """Median, p90, p99, max and mean of durations, with the tail ratios p99 / median and max / median."""
    v = np.asarray(values_s, dtype=np.float64)
    if v.size == 0:
        return {}
    median = float(np.median(v))
    p99 = float(np.percentile(v, 99))
    return {"count": float(v.size), "mean": float(v.mean()), "median": median, "p90": float(np.percentile(v, 90)),
            "p99": p99, "max": float(v.max()), "p99_over_median": p99 / median if median else 0.0,
            "max_over_median": float(v.max()) / median if median else 0.0}
