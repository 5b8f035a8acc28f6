"""The infra rate per iteration and per cause (rollouts/infra_rate.py), table-driven: attempts from the rollout's
`attempt` number, causes from its STATE events; a rollout whose every attempt was infra (never trained on) counts."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.records import Event, EventKind, FailureKind, InfraReason, RolloutState
from rollouts.feed import FeedConfig, RolloutFeed
from rollouts.infra_rate import UNKNOWN, infra_metrics, infra_reasons, needs_events
from tests.trainer.loop_support import FakeGateway, rollout

S, F, C, Q = RolloutState.SUCCEEDED, RolloutState.FAILED, RolloutState.CANCELLED, RolloutState.QUEUED
AGENT, INFRA = FailureKind.AGENT, FailureKind.INFRA


def state(attempt: int, new_state: str, reason: str | None = None, kind: str | None = None) -> Event:
    payload: dict[str, Any] = {"state": new_state, "failure_kind": kind, "error": "why"}
    if reason is not None:
        payload["reason"] = reason
    return Event(id=attempt, rollout_id="r", attempt=attempt, kind=EventKind.STATE, payload=payload, created_at=0.0)


def requeued(attempt: int, reason: str | None) -> list[Event]:
    return [state(attempt, "running"), state(attempt, "queued", reason)]


ENGINE, LEASE, EVICTED = InfraReason.ENGINE_UNREACHABLE, InfraReason.LEASE_EXPIRED, InfraReason.EVICTED
REWARD = Event(id=9, rollout_id="r", attempt=1, kind=EventKind.REWARD, payload={"reward": 0.0}, created_at=0.0)

# (rollouts as (id, state, failure_kind, attempt), events by id, rate, attempts, infra_failed, {reason: count})
CASES = {
    "nothing finished": ([], {}, 0.0, 0, 0, {}),
    "first attempts only": ([("a", S, None, 1), ("b", F, AGENT, 1)], {}, 0.0, 2, 0, {}),
    "one retry then success": ([("a", S, None, 2), ("b", S, None, 1)],
                               {"a": [*requeued(1, ENGINE), state(2, "running"), REWARD]}, 1 / 3, 3, 0, {ENGINE: 1}),
    "all attempts infra: counted though never trained on": (
        [("a", F, INFRA, 3)],
        {"a": [*requeued(1, LEASE), *requeued(2, ENGINE), state(3, "running"),
               state(3, "failed", EVICTED, "infra")]}, 1.0, 3, 1, {LEASE: 1, ENGINE: 1, EVICTED: 1}),
    "a state change without a reason is unknown": ([("a", S, None, 2)], {"a": requeued(1, None)}, 0.5, 2, 0,
                                                    {UNKNOWN: 1}),
    "events not read: every infra attempt unknown": ([("a", F, INFRA, 2)], {}, 1.0, 2, 1, {UNKNOWN: 2}),
    "an agent failure after a retry": ([("a", F, AGENT, 2)],
                                       {"a": [*requeued(1, EVICTED), state(2, "failed", None, "agent")]}, 0.5, 2, 0,
                                       {EVICTED: 1}),
    "cancelled before any claim": ([("a", C, None, 0)], {}, 0.0, 0, 0, {}),
    "cancelled after a retry": ([("a", C, None, 2)], {"a": requeued(1, ENGINE)}, 0.5, 2, 0, {ENGINE: 1}),
    "not finished yet: not counted": ([("a", Q, None, 1), ("b", S, None, 1)], {"a": requeued(1, ENGINE)}, 0.0, 1, 0,
                                      {}),
}


@pytest.mark.parametrize(("members", "events", "rate", "attempts", "failed", "reasons"), CASES.values(),
                         ids=CASES.keys())
def test_infra_metrics_table(members, events, rate, attempts, failed, reasons):
    rollouts = [rollout(rid, state=st, failure_kind=kind, attempt=attempt, reward=None)
                for rid, st, kind, attempt in members]
    metrics = infra_metrics(rollouts, events)
    assert metrics["rollout/infra_retry_rate"] == pytest.approx(rate)
    assert (metrics["rollout/attempts"], metrics["rollout/infra_failed"]) == (attempts, failed)
    assert metrics["rollout/infra_attempts"] == sum(reasons.values())
    by_reason = {key.removeprefix("rollout/infra/"): value for key, value in metrics.items()
                 if key.startswith("rollout/infra/")}
    assert set(by_reason) == {*(r.value for r in InfraReason), UNKNOWN}  # every cause, every iteration: a curve
    assert {reason: count for reason, count in by_reason.items() if count} == {str(r): n for r, n in reasons.items()}


def test_only_rollouts_with_an_infra_attempt_need_their_events():
    assert [needs_events(rollout(state=st, failure_kind=kind, attempt=n)) for st, kind, n in [
        (S, None, 1), (F, AGENT, 1), (S, None, 2), (F, INFRA, 1), (C, None, 0)]] == [False, False, True, True, False]


def test_infra_reasons_reads_requeues_and_infra_failures_only():
    events = [state(1, "running"), state(1, "queued", "lease_expired"), state(2, "running"),
              state(2, "failed", "agent_reason_ignored", "agent"), REWARD]
    assert infra_reasons(events) == ["lease_expired"]


def test_the_feed_hands_over_every_finished_member_once_with_the_events_of_the_retried_ones():
    """Members count when they finish, in complete groups or not (a group the trainer drops or never takes too)."""
    gateway = FakeGateway()
    feed = RolloutFeed(gateway, FeedConfig(2, "run"), iter([(0, {"id": "t0"})]))
    feed.submit(1, 0)
    gateway.finish("run-0-0", 1.0)
    retried = rollout("run-0-0", "run-0", 1.0, attempt=2, finished_seq=1)
    gateway.finished_log[0] = retried
    gateway.event_log["run-0-0"] = requeued(1, ENGINE)
    assert feed.poll(0.0) == 0  # the group is not complete: its finished member counts already
    members, events = feed.take_finished()
    assert [r.id for r in members] == ["run-0-0"] and list(events) == ["run-0-0"]
    assert infra_metrics(members, events)["rollout/infra/engine_unreachable"] == 1.0
    gateway.finish("run-0-1", 0.0)
    assert feed.poll(0.0) == 1
    members, events = feed.take_finished()
    assert [r.id for r in members] == ["run-0-1"] and events == {}  # a first attempt: no events read
    assert feed.take_finished() == ([], {})
