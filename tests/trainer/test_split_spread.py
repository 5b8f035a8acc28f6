"""split_spread_metrics: within-group variance of samples per rollout and the share of groups where it varies."""

from __future__ import annotations

import pytest

from trainer.split_spread import split_spread_metrics


def pairs(groups: dict[str, list[int]]) -> list[tuple[str, str]]:
    """One (rollout, group) pair per sample, from each group's samples per rollout."""
    return [(f"{group}-r{k}", group) for group, counts in groups.items() for k, n in enumerate(counts)
            for _ in range(n)]


@pytest.mark.parametrize(("groups", "variance", "share"), [
    ({}, 0.0, 0.0),
    ({"a": [2, 2, 2, 2]}, 0.0, 0.0),  # the old multistep: every rollout of a task split alike
    ({"a": [1, 3]}, 1.0, 1.0),
    ({"a": [1, 3], "b": [2, 2]}, 0.5, 0.5),
    ({"a": [1, 2, 3], "b": [1, 1, 1], "c": [4]}, (2 / 3) / 3, 1 / 3),
])
def test_table(groups, variance, share):
    metrics = split_spread_metrics(pairs(groups))
    assert metrics["samples/per_rollout_var_within_group"] == pytest.approx(variance)
    assert metrics["samples/groups_with_varied_splits_share"] == pytest.approx(share)


def test_order_of_samples_does_not_matter():
    forward = pairs({"a": [1, 3, 2], "b": [2, 5]})
    assert split_spread_metrics(forward) == split_spread_metrics(list(reversed(forward)))
