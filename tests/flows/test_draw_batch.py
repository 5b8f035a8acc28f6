"""The training loop's batch draw (`flows.train.draw_batch`): plain, one draw of `rollout.batch_groups`; with
`algorithm.dynamic_sampling`, draws until that many groups with signal, their waits summed and the metrics returned."""

from __future__ import annotations

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


def config(**dynamic) -> RunConfig:
    return RunConfig.model_validate({"recipe": "instruction_following", "rollout": {"batch_groups": 2},
                                     "algorithm": {"dynamic_sampling": dynamic}})


def test_without_dynamic_sampling_one_draw_takes_the_batch_flat_groups_included(monkeypatch):
    asked = queued(monkeypatch, [group("a", [1.0, 1.0]), group("b", [1.0, 0.0]), group("c", [0.0, 1.0])])
    groups, waited_s, metrics = train.draw_batch(config(), feed=None, version=0, label="it 1")
    assert [g.group_id for g in groups] == ["a", "b"] and asked == [2] and waited_s == 1.5 and metrics == {}


def test_dynamic_sampling_draws_again_for_flat_groups_and_sums_the_waits(monkeypatch):
    asked = queued(monkeypatch, [group("a", [1.0, 1.0]), group("b", [1.0, 0.0]), group("c", [0.0, 1.0])])
    groups, waited_s, metrics = train.draw_batch(config(enabled=True), feed=None, version=0, label="it 1")
    assert [g.group_id for g in groups] == ["b", "c"] and asked == [2, 1] and waited_s == 3.0
    assert metrics["dynamic_sampling/groups_dropped"] == 1.0 and metrics["dynamic_sampling/draws"] == 2.0
