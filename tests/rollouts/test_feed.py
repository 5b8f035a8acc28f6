"""RolloutFeed: groups of n with deterministic ids, completion only when every member finished, data position."""

from __future__ import annotations

import pytest

from gateway.records import RolloutMode
from rollouts.feed import FeedConfig, RolloutFeed, val_pass
from tests.trainer.loop_support import FakeGateway
from trainer.rollout_groups import drop_stale


def tasks(n: int):
    return iter([(i, {"id": f"t{i}"}) for i in range(n)])


def make_feed(gateway: FakeGateway, n_tasks: int = 10, group_size: int = 2, **config) -> RolloutFeed:
    return RolloutFeed(gateway, FeedConfig(group_size, "run", **config), tasks(n_tasks))


def test_submit_creates_groups_of_n_with_deterministic_ids_and_overrides():
    gateway = FakeGateway()
    feed = make_feed(gateway, task_overrides={"max_tokens": 8}, mode=RolloutMode.VAL)
    assert feed.submit(2, policy_version=0) == 2
    assert [s.id for s in gateway.created] == ["run-0-0", "run-0-1", "run-1-0", "run-1-1"]
    assert {s.group_id for s in gateway.created} == {"run-0", "run-1"}
    assert all(s.input == {"id": s.group_id.replace("run-", "t"), "max_tokens": 8} for s in gateway.created)
    assert all(s.mode == RolloutMode.VAL for s in gateway.created)
    assert feed.in_flight == 2 and feed.next_task == 2


def test_fill_tops_up_to_the_target_and_stops_when_tasks_run_out():
    gateway = FakeGateway()
    feed = make_feed(gateway, n_tasks=3)
    assert feed.fill(2, 0) == 2
    assert feed.fill(2, 0) == 0
    assert feed.fill(5, 0) == 1  # only one task left
    assert feed.in_flight == 3 and feed.next_task == 3


def test_a_group_completes_only_when_all_members_finished_and_take_is_fifo():
    gateway = FakeGateway()
    feed = make_feed(gateway)
    feed.submit(2, policy_version=3)
    gateway.finish("run-1-0", 1.0)
    gateway.finish("run-0-0", 0.0)
    assert feed.poll(0.0) == 0 and feed.ready == 0
    gateway.finish("run-1-1", 0.5, versions=(3, 4))
    assert feed.poll(0.0) == 1
    gateway.finish("run-0-1", 1.0)
    assert feed.poll(0.0) == 1
    first, second = feed.take(5)
    assert first.group_id == "run-1" and second.group_id == "run-0"
    assert [r.id for r in first.rollouts] == ["run-1-0", "run-1-1"]  # creation order, not finishing order
    assert [c.policy_version for c in first.calls["run-1-1"]] == [3, 4]
    assert first.submitted_version == 3 and feed.ready == 0 and feed.in_flight == 0


def test_foreign_rollouts_on_the_same_gateway_are_ignored():
    gateway = FakeGateway()
    other = make_feed(gateway, n_tasks=1)
    feed = RolloutFeed(gateway, FeedConfig(1, "mine"), tasks(1))
    other.submit(1, 0)
    feed.submit(1, 0)
    gateway.finish("run-0-0", 1.0)
    gateway.finish("run-0-1", 1.0)
    assert feed.poll(0.0) == 0
    gateway.finish("mine-0-0", 1.0)
    assert feed.poll(0.0) == 1 and feed.take(1)[0].group_id == "mine-0"


def test_wait_for_times_out_naming_the_counts_and_refuses_to_wait_on_nothing():
    now = [0.0]
    gateway = FakeGateway()
    feed = RolloutFeed(gateway, FeedConfig(1, "run"), tasks(2), clock=lambda: now[0])
    with pytest.raises(RuntimeError, match="none is in flight"):
        feed.wait_for(1, timeout_s=10)
    feed.submit(2, 0)
    gateway.finish("run-0-0", 1.0)

    def tick(_ready: int) -> None:
        now[0] += 4.0

    with pytest.raises(TimeoutError, match="1 of 2 groups complete"):
        feed.wait_for(2, timeout_s=10, poll_s=5, on_poll=tick)
    assert gateway.polls and max(gateway.polls) <= 5


def test_group_size_must_be_positive():
    with pytest.raises(ValueError, match="group_size=0"):
        FeedConfig(0, "run")


def test_a_failed_create_records_nothing_and_the_next_submit_sends_the_same_tasks():
    gateway = FakeGateway(fail_creates=1)
    feed = make_feed(gateway, n_tasks=3)
    with pytest.raises(ConnectionError):
        feed.fill(2, 0)
    assert feed.in_flight == 0 and feed.next_task == 0 and feed.open_tasks == []
    assert feed.fill(2, 0) == 2, "a retry submits the groups the failed call could not create"
    assert [s.group_id for s in gateway.created] == ["run-0", "run-0", "run-1", "run-1"]


def test_open_tasks_are_the_groups_submitted_and_not_taken_and_a_resume_starts_with_them():
    gateway = FakeGateway()
    feed = make_feed(gateway, n_tasks=10, group_size=1)
    feed.submit(4, 0)
    for rid in ("run-1-0", "run-3-0"):
        gateway.finish(rid, 1.0)
    feed.poll(0.0)
    assert [g.group_id for g in feed.take(1)] == ["run-1"]
    assert feed.open_tasks == [0, 2, 3] and feed.next_task == 4  # run-3 is complete but not taken

    rows = [{"id": f"t{i}"} for i in range(10)]
    resumed_tasks = iter([*((i, rows[i]) for i in feed.open_tasks), *((i, rows[i]) for i in range(4, 10))])
    resumed = RolloutFeed(gateway, FeedConfig(1, "run"), resumed_tasks, next_task=4)
    assert resumed.next_task == 4 and resumed.open_tasks == []
    resumed.submit(4, 1)
    assert [s.id for s in gateway.created[4:]] == ["run-0-0", "run-2-0", "run-3-0", "run-4-0"]
    assert resumed.next_task == 5


def test_calls_are_the_final_attempts_and_not_fetched_when_switched_off():
    gateway = FakeGateway()
    feed = make_feed(gateway, n_tasks=1, group_size=1)
    feed.submit(1, 0)
    gateway.finish("run-0-0", 1.0, versions=(0, 1))
    feed.poll(0.0)
    assert len(feed.take(1)[0].calls["run-0-0"]) == 2 and gateway.call_requests == ["run-0-0"]

    quiet = FakeGateway()
    feed = make_feed(quiet, n_tasks=1, group_size=1, fetch_calls=False)
    feed.submit(1, 0)
    quiet.finish("run-0-0", 1.0)
    feed.poll(0.0)
    assert feed.take(1)[0].calls == {"run-0-0": ()} and quiet.call_requests == []


def test_tampered_members_are_read_from_the_final_attempts_reward_and_counted_per_iteration():
    gateway = FakeGateway()
    feed = make_feed(gateway, n_tasks=1, group_size=3)
    feed.submit(1, 0)
    gateway.finish("run-0-0", 0.0, details={"tamper": True, "tamper_reasons": ["pytest.py: shadows the runner"]})
    gateway.finish("run-0-1", 0.0, details={"tamper": False})
    gateway.finish("run-0-2", 1.0)
    gateway.event_log["run-0-1"] += [gateway.event_log["run-0-0"][0].model_copy(update={"attempt": 0})]  # old try
    feed.poll(0.0)
    finished = feed.take(1)
    assert finished[0].tampered == frozenset({"run-0-0"})
    split = drop_stale(finished, 0, 0)
    assert split.kept[0].tampered == frozenset({"run-0-0"}) and split.as_metrics()["rollout/tamper"] == 1.0
    assert drop_stale(finished, 5, 0).as_metrics()["rollout/tamper"] == 1.0  # counted even when dropped as stale

    quiet = FakeGateway()
    feed = make_feed(quiet, n_tasks=1, group_size=1, fetch_grades=False)
    feed.submit(1, 0)
    quiet.finish("run-0-0", 0.0, details={"tamper": True})
    feed.poll(0.0)
    assert feed.take(1)[0].tampered == frozenset()


def test_run_once_returns_the_finished_groups_and_lists_the_unfinished_tasks():
    gateway = FakeGateway()
    clock = iter(range(0, 1000, 4))
    original = gateway.finished

    def finished(after=0, limit=100, wait_s=0.0):
        if not gateway.finished_log:
            gateway.finish("val-1-0", 1.0)
            gateway.finish("val-1-1", 0.0)
        return original(after, limit, wait_s)

    gateway.finished = finished
    rows = [{"id": "a"}, {"id": "b"}, {"id": "c"}]
    config = FeedConfig(2, "val", RolloutMode.VAL, fetch_calls=False)
    groups, unfinished = val_pass(gateway, config, rows, 0, timeout_s=10.0, clock=lambda: float(next(clock)))
    assert [g.group_id for g in groups] == ["val-1"] and unfinished == ["a", "c"]
    assert len(gateway.created) == 6 and all(s.mode == RolloutMode.VAL for s in gateway.created)
