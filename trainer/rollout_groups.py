"""Groups of rollouts of one task: which of their rollouts are too stale to train on.

Pure bookkeeping for the training loop; the groups themselves (`FinishedGroup`, `PendingGroup`) are `rollouts.groups`'
(re-exported here). In the collocated asynchronous schedule a rollout can span several policy versions (its
calls continue under the new weights after a refit); its staleness is the lag between the trainer's current version
and the OLDEST version that produced one of its calls. Rollouts lagging more than `max_version_lag` are dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gateway.records import CallRecord, CallStatus, Rollout
from rollouts.groups import FinishedGroup, PendingGroup

__all__ = ["FinishedGroup", "PendingGroup", "StalenessSplit", "drop_stale", "min_call_version", "stale_R",
           "version_lag_R"]


def min_call_version(rollout: Rollout, calls: Sequence[CallRecord]) -> int | None:
    """The oldest policy version among the final attempt's successful calls (None: no such call)."""
    versions = [c.policy_version for c in calls
                if c.attempt == rollout.attempt and c.status == CallStatus.OK and c.policy_version is not None]
    return min(versions) if versions else None


def version_lag_R(oldest_versions_R: np.ndarray, current_version: int) -> np.ndarray:
    """How many versions behind the current policy each rollout's oldest call is (0 for rollouts without calls)."""
    return np.maximum(current_version - oldest_versions_R, 0)


def stale_R(lag_R: np.ndarray, max_version_lag: int) -> np.ndarray:
    """Which rollouts lag more than `max_version_lag` versions."""
    if max_version_lag < 0:
        raise ValueError(f"max_version_lag={max_version_lag} must be >= 0 (0: only on-policy rollouts)")
    return lag_R > max_version_lag


@dataclass(frozen=True)
class StalenessSplit:
    """The members kept for training and the dropped ones, with the lag statistics."""

    kept: tuple[FinishedGroup, ...]
    """Groups with their stale members removed (groups left empty are omitted)."""
    dropped_rollouts: int
    """Rollouts dropped as too stale."""
    lags: tuple[int, ...]
    """The lag of every rollout with calls (kept or dropped), in group order."""
    tampered: int = 0
    """Rollouts of these groups (kept or dropped) whose grade the grader flagged `tamper`."""

    @property
    def lag_mean(self) -> float:
        """Mean lag over all rollouts with calls."""
        return float(np.mean(self.lags)) if self.lags else 0.0

    @property
    def lag_max(self) -> int:
        """Largest lag seen."""
        return max(self.lags, default=0)

    def as_metrics(self) -> dict[str, float]:
        """Flat metrics for the tracker."""
        return {"staleness/dropped_rollouts": float(self.dropped_rollouts),
                "staleness/lag_mean": self.lag_mean, "staleness/lag_max": float(self.lag_max),
                "rollout/tamper": float(self.tampered)}


def drop_stale(groups: Sequence[FinishedGroup], current_version: int, max_version_lag: int) -> StalenessSplit:
    """Removes the rollouts lagging more than `max_version_lag` behind `current_version`."""
    rollouts = [(g, r) for g in groups for r in g.rollouts]
    oldest = [min_call_version(r, g.calls.get(r.id, ())) for g, r in rollouts]
    has_calls_R = np.array([v is not None for v in oldest], dtype=bool)
    lag_R = version_lag_R(np.array([current_version if v is None else v for v in oldest], dtype=np.int64),
                          current_version)
    stale = stale_R(lag_R, max_version_lag)
    kept_ids = {r.id for (_, r), is_stale in zip(rollouts, stale, strict=True) if not is_stale}
    kept = []
    for group in groups:
        members = tuple(r for r in group.rollouts if r.id in kept_ids)
        if members:
            kept.append(FinishedGroup(group.group_id, group.task, members,
                                      {r.id: group.calls.get(r.id, ()) for r in members}, group.submitted_version,
                                      group.tampered & kept_ids))
    return StalenessSplit(tuple(kept), int(stale.sum()), tuple(int(lag) for lag in lag_R[has_calls_R]),
                          sum(len(group.tampered) for group in groups))
