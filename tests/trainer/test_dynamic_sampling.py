"""DAPO-style dynamic sampling: draws until the batch holds batch_groups groups with reward variance, counted; the
variance is that of the rewards the step trains on (the format term and the overlong penalty applied)."""

from __future__ import annotations

import pytest

from tests.trainer.loop_support import call, group
from trainer.advantages import AdvantageConfig
from trainer.dynamic_sampling import DynamicSamplingConfig, collect_with_signal, group_has_signal
from trainer.prepared_step import prepare_step
from trainer.samples import SampleLimits


def drawer(groups):
    """A draw that hands out `groups` in order and records how many were asked for each time."""
    queue, asked = list(groups), []

    def draw(n):
        asked.append(n)
        taken, queue[:] = queue[:n], queue[n:]
        return taken

    return draw, asked


def signal(g):
    return group_has_signal(g, AdvantageConfig(), policy_version=0, max_version_lag=2)


def test_flat_groups_are_dropped_and_the_shortfall_drawn_again():
    groups = [group("a", [1.0, 1.0]), group("b", [1.0, 0.0]), group("c", [0.0, 0.0]), group("d", [0.0, 1.0]),
              group("e", [0.5, 0.0])]
    draw, asked = drawer(groups)
    found = collect_with_signal(draw, signal, 2, DynamicSamplingConfig(enabled=True))
    assert [g.group_id for g in found.groups] == ["b", "d"] and asked == [2, 1, 1]
    assert found.metrics == {"dynamic_sampling/groups_drawn": 4.0, "dynamic_sampling/groups_dropped": 2.0,
                             "dynamic_sampling/draws": 3.0, "dynamic_sampling/short": 0.0}


def test_a_batch_still_short_after_max_draws_trains_on_what_it_has():
    draw, asked = drawer([group("f0", [1.0, 1.0]), group("s0", [1.0, 0.0]), group("f1", [0.0, 0.0]),
                          group("f2", [1.0, 1.0]), group("s1", [0.0, 1.0])])
    found = collect_with_signal(draw, signal, 3, DynamicSamplingConfig(enabled=True, max_draws=2))
    assert [g.group_id for g in found.groups] == ["s0", "s1"] and asked == [3, 2]
    assert found.metrics["dynamic_sampling/short"] == 1.0 and found.metrics["dynamic_sampling/groups_dropped"] == 3.0


def test_without_any_group_with_signal_the_drawn_groups_come_back_to_report_no_signal():
    draw, asked = drawer([group(f"f{i}", [1.0, 1.0]) for i in range(5)])
    found = collect_with_signal(draw, signal, 2, DynamicSamplingConfig(enabled=True, max_draws=2))
    assert [g.group_id for g in found.groups] == ["f0", "f1", "f2", "f3"] and asked == [2, 2]
    assert found.metrics["dynamic_sampling/short"] == 1.0


@pytest.mark.parametrize(("rewards", "failures", "versions", "expected"), [
    ([1.0, 0.0], {}, {}, True),
    ([1.0, 1.0], {}, {}, False),
    ([0.7], {}, {}, False),  # one member: no variance
    ({"x": 1.0, "y": None}, {"y": "infra"}, {}, False),  # the infra failure does not count
    ({"x": None, "y": None}, {"x": "infra", "y": "infra"}, {}, False),  # no member counts
    ({"x": 1.0, "y": None}, {"y": "agent"}, {}, True),  # an agent failure counts with reward 0
    ({"x": 1.0, "y": 0.0}, {}, {"y": (0,)}, False),  # y is 5 versions stale at version 5: dropped
])
def test_group_has_signal_counts_only_members_that_will_train(rewards, failures, versions, expected):
    g = group("g", rewards, failures=failures, versions=versions, version=5 if versions else 0)
    version = 5 if versions else 0
    assert group_has_signal(g, AdvantageConfig(), version, max_version_lag=2) is expected


FORMAT = AdvantageConfig(format_reward=0.2)
SOFT = AdvantageConfig(overlong_max_tokens=100, overlong_buffer_tokens=20)
"""A response of 90 tokens costs 0.5, one of 100 or more the whole 1.0."""
BOTH = AdvantageConfig(format_reward=0.5, overlong_max_tokens=100, overlong_buffer_tokens=20)


@pytest.mark.parametrize(("config", "rewards", "shares", "lengths", "expected"), [
    (FORMAT, {"a": 0.0, "b": 0.0}, {"a": 1.0, "b": 0.0}, {}, True),  # only the format term differs: kept
    (FORMAT, {"a": 1.0, "b": 1.0}, {"a": 0.5}, {}, True),  # b's share is 0 (not named)
    (FORMAT, {"a": 0.0, "b": 0.0}, {"a": 0.5, "b": 0.5}, {}, False),
    (AdvantageConfig(), {"a": 0.0, "b": 0.0}, {"a": 1.0, "b": 0.0}, {}, False),  # the term off: shares ignored
    (SOFT, {"a": 1.0, "b": 0.5}, {}, {"a": 90}, False),  # the penalty makes 1.0 - 0.5 equal to 0.5: dropped
    (SOFT, {"a": 1.0, "b": 0.0}, {}, {"a": 100}, False),  # a loses the whole factor: 0 and 0
    (SOFT, {"a": 1.0, "b": 0.0}, {}, {"a": 100, "b": 100}, True),  # both lose it: 0 and -1
    (SOFT, {"a": 1.0, "b": 1.0}, {}, {"a": 100}, True),  # only the penalty differs: kept
    (SOFT, {"a": 1.0, "b": 0.0}, {}, {"a": 90}, True),
    (BOTH, {"a": 0.0, "b": 1.0}, {"a": 1.0, "b": 0.0}, {"b": 90}, False),  # 0 + 0.5 == 1.0 - 0.5
    (BOTH, {"a": 0.0, "b": 0.0}, {"a": 1.0, "b": 0.0}, {"a": 90}, False),  # 0 + 0.5 - 0.5 == 0
])
def test_the_signal_test_reads_the_rewards_the_step_trains_on(config, rewards, shares, lengths, expected):
    g = group("g", rewards, calls=lambda rid: (call(rid, 0, 0, list(range(lengths.get(rid, 2)))),))
    has_signal = group_has_signal(g, config, 0, max_version_lag=2, format_shares=lambda groups: shares)
    assert has_signal is expected
    assert has_signal is not prepare_step([g], config, SampleLimits(), format_shares=shares).no_signal


def test_the_format_term_without_shares_names_the_setting():
    with pytest.raises(ValueError, match="algorithm.advantage.format_reward"):
        group_has_signal(group("g", [0.0, 0.0]), FORMAT, 0, max_version_lag=2)


def test_max_draws_must_be_positive():
    with pytest.raises(ValueError, match="max_draws=0"):
        DynamicSamplingConfig(max_draws=0)
