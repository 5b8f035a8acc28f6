"""How a batch's rollouts split into samples within their groups (pure): the spread that separates sample-level from
rollout-level advantages.

When every rollout of a group splits into the same number of samples, sample-level GRPO only rescales the group's
advantages (an effective learning-rate change); the arms of the rollout-level ablation differ in direction only where
the number varies within a group. `split_spread_metrics` measures that: the within-group variance of samples per
rollout (population variance, mean over groups) and the share of groups where it is not zero.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np


def split_spread_metrics(rollout_group_ids: Iterable[tuple[str, str]], prefix: str = "samples") -> dict[str, float]:
    """Metrics from one (rollout id, group id) pair per sample: `{prefix}/per_rollout_var_within_group` and
    `{prefix}/groups_with_varied_splits_share` (0 for an empty batch). Rollouts without samples are not seen."""
    per_rollout: Counter[tuple[str, str]] = Counter(rollout_group_ids)
    counts_by_group: dict[str, list[int]] = {}
    for (_, group_id), count in per_rollout.items():
        counts_by_group.setdefault(group_id, []).append(count)
    if not counts_by_group:
        return {f"{prefix}/per_rollout_var_within_group": 0.0, f"{prefix}/groups_with_varied_splits_share": 0.0}
    variances_G = np.array([np.var(counts) for counts in counts_by_group.values()])
    return {f"{prefix}/per_rollout_var_within_group": float(variances_G.mean()),
            f"{prefix}/groups_with_varied_splits_share": float((variances_G > 0).mean())}
