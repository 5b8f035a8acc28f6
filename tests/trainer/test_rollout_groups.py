"""Staleness: a rollout's lag is measured from its OLDEST call; rollouts beyond max_version_lag are dropped."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.trainer.loop_support import call, group, rollout
from trainer.rollout_groups import FinishedGroup, drop_stale, min_call_version, stale_R, version_lag_R


@pytest.mark.parametrize(("versions", "current", "max_lag", "kept", "dropped"), [
    ({"a": (3,), "b": (3,)}, 3, 0, ["a", "b"], 0),       # on-policy
    ({"a": (1, 3), "b": (3,)}, 3, 1, ["b"], 1),         # a's oldest call is 2 behind
    ({"a": (1, 3), "b": (2,)}, 3, 2, ["a", "b"], 0),
    ({"a": (0,), "b": (0,)}, 3, 2, [], 2),              # the whole group goes
])
def test_drop_stale_table(versions, current, max_lag, kept, dropped):
    split = drop_stale([group("g", dict.fromkeys(versions, 1.0), versions=versions)], current, max_lag)
    assert [r.id for g in split.kept for r in g.rollouts] == kept
    assert split.dropped_rollouts == dropped
    assert all(set(g.calls) == {r.id for r in g.rollouts} for g in split.kept)


def test_lag_statistics_and_rollouts_without_calls():
    no_calls = FinishedGroup("g2", {}, (rollout("c", "g2"),), {"c": ()}, 0)
    lagging = group("g", {"a": 1.0, "b": 1.0}, versions={"a": (1, 3), "b": (3,)})
    split = drop_stale([lagging, no_calls], 3, 5)
    assert split.lag_max == 2 and split.lag_mean == pytest.approx(1.0)  # c has no calls: no lag recorded
    assert split.as_metrics()["staleness/dropped_rollouts"] == 0.0
    assert [g.group_id for g in split.kept] == ["g", "g2"]


def test_min_call_version_ignores_failed_calls_and_earlier_attempts():
    r = rollout("a", "g", attempt=2)
    calls = [call("a", 0, 0, [1], attempt=1), call("a", 1, 5, [1], attempt=2, status="error"),
             call("a", 2, 6, [1], attempt=2)]
    assert min_call_version(r, calls) == 6
    assert min_call_version(r, calls[:2]) is None


def test_negative_max_lag_is_an_error():
    with pytest.raises(ValueError, match="max_version_lag=-1"):
        stale_R(np.array([0]), -1)


@given(st.lists(st.integers(0, 50), min_size=1, max_size=20), st.integers(0, 60), st.integers(0, 10))
def test_lag_is_never_negative_and_stale_iff_above_max(oldest, current, max_lag):
    lag_R = version_lag_R(np.array(oldest), current)
    assert (lag_R >= 0).all()
    assert (stale_R(lag_R, max_lag) == (np.maximum(current - np.array(oldest), 0) > max_lag)).all()
