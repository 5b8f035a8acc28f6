"""The training loop's batch draw (`flows.train.draw_batch`): plain, one draw of `rollout.batch_groups`; with
`algorithm.dynamic_sampling`, draws until that many groups with signal, their waits summed and the metrics returned."""

from __future__ import annotations

from types import SimpleNamespace

import flows.train as train
from flows.config import RunConfig
from tests.trainer.loop_support import group


def queued(monkeypatch, groups):
    """The feed's complete groups in order, each draw waiting 1.5 s; returns the sizes asked for."""
    queue, asked = list(groups), []

    def collect(feed, n, timeout_s, label):
        asked.append(n)
        taken, queue[:] = queue[:n], queue[n:]
        return taken, 1.5

    monkeypatch.setattr(train, "fill_in_flight", lambda feed, target, version: None)
    monkeypatch.setattr(train, "collect_groups", collect)
    return asked


FEED = SimpleNamespace(ready=0)
"""A feed with no complete group waiting (fill_in_flight and collect_groups are replaced)."""


def config(**dynamic) -> RunConfig:
    return RunConfig.model_validate({"recipe": "instruction_following", "rollout": {"batch_groups": 2},
                                     "algorithm": {"dynamic_sampling": dynamic}})


def test_without_dynamic_sampling_one_draw_takes_the_batch_flat_groups_included(monkeypatch):
    asked = queued(monkeypatch, [group("a", [1.0, 1.0]), group("b", [1.0, 0.0]), group("c", [0.0, 1.0])])
    groups, waited_s, metrics = train.draw_batch(config(), feed=FEED, version=0, label="it 1", iterations_left=1)
    assert [g.group_id for g in groups] == ["a", "b"] and asked == [2] and waited_s == 1.5 and metrics == {}


def test_dynamic_sampling_draws_again_for_flat_groups_and_sums_the_waits(monkeypatch):
    asked = queued(monkeypatch, [group("a", [1.0, 1.0]), group("b", [1.0, 0.0]), group("c", [0.0, 1.0])])
    groups, waited_s, metrics = train.draw_batch(config(enabled=True), feed=FEED, version=0, label="it 1",
                                                 iterations_left=1)
    assert [g.group_id for g in groups] == ["b", "c"] and asked == [2, 1] and waited_s == 3.0
    assert metrics["dynamic_sampling/groups_dropped"] == 1.0 and metrics["dynamic_sampling/draws"] == 2.0


def test_the_in_flight_target_never_exceeds_what_the_remaining_iterations_take(monkeypatch):
    """Async keeps max_inflight_groups (6) in flight, but the last iteration of batches of 4 with one group already
    complete needs 3 more: a 4th to 6th group would finish after the run ended, their harnesses' CPU wasted."""
    targets = []
    monkeypatch.setattr(train, "fill_in_flight", lambda feed, target, version: targets.append(target))
    monkeypatch.setattr(train, "collect_groups", lambda feed, n, timeout_s, label: ([], 0.0))
    async_config = RunConfig.model_validate({"recipe": "instruction_following", "rollout": {
        "batch_groups": 4, "schedule": "async", "max_inflight_groups": 6}})
    for iterations_left, ready in ((3, 0), (2, 1), (1, 1), (1, 4)):
        train.draw_batch(async_config, SimpleNamespace(ready=ready), 0, "it", iterations_left=iterations_left)
    assert targets == [6, 6, 3, 0]
