"""The rollout admin API against a real gateway: create, claim and lease, states, rewards, events, finished, calls."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from gateway.client import GatewayAPIError, GatewayClient
from gateway.records import EventKind, FailureKind, InfraReason, RolloutSpec, RolloutState
from tests.gateway.api_support import chat, create_rollouts, current_key, new_id
from tests.gateway.support import ADMIN_TOKEN


@pytest.fixture(autouse=True)
def empty_queue(admin):
    """Claim and cancel whatever is queued, so each test's claims see only its own rollouts."""
    while batch := admin.claim("sweeper", limit=1000, lease_s=3600):
        for rollout in batch:
            admin.set_state(rollout.id, RolloutState.CANCELLED)


def harness_call(created, body: dict | None = None) -> httpx.Response:
    return httpx.post(created.base_url + "/chat/completions", json=body or chat(), timeout=30,
                      headers={"authorization": f"Bearer {created.api_key}"})


def test_batch_create_returns_urls_and_keys_and_is_idempotent(gateway, admin) -> None:
    group = new_id("g")
    specs = [RolloutSpec(id=new_id("c"), group_id=group, input={"task": i}) for i in range(3)]
    first = admin.create_rollouts(specs)
    extra = RolloutSpec(id=new_id("c"), group_id=group)
    again = admin.create_rollouts([*specs, extra])
    assert [c.base_url for c in first] == [f"{gateway.url}/r/{s.id}/v1" for s in specs]
    assert [(c.id, c.api_key, c.created) for c in again[:3]] == [(c.id, c.api_key, False) for c in first]
    assert (again[3].id, again[3].created, all(c.created for c in first)) == (extra.id, True, True)
    stored = admin.get_rollout(specs[1].id)
    assert (stored.state, stored.attempt, stored.input, stored.group_id) == (RolloutState.QUEUED, 0, {"task": 1}, group)


def test_two_controllers_claiming_concurrently_never_double_claim(gateway) -> None:
    with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
        ids = {c.id for c in create_rollouts(admin, 40, prefix="race")}
    start = threading.Barrier(2)
    claimed: dict[str, list] = {"c1": [], "c2": []}

    def controller(name: str) -> None:
        with GatewayClient(gateway.url, ADMIN_TOKEN) as client:
            start.wait()
            while batch := client.claim(name, limit=3, lease_s=600):
                claimed[name].extend(batch)

    threads = [threading.Thread(target=controller, args=(name,)) for name in claimed]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    c1, c2 = ({r.id for r in claimed[name]} for name in ("c1", "c2"))
    assert (c1 & c2, c1 | c2, len(claimed["c1"]) + len(claimed["c2"])) == (set(), ids, 40)
    assert all((r.lease_owner, r.attempt, r.state) == (name, 1, RolloutState.RUNNING)
               for name, batch in claimed.items() for r in batch)


def test_only_the_lease_owner_may_renew(admin) -> None:
    (created,) = create_rollouts(admin, prefix="lease")
    (claimed,) = admin.claim("owner", lease_s=30)
    with pytest.raises(GatewayAPIError) as stranger:
        admin.renew_lease(created.id, "stranger", lease_s=600)
    renewed = admin.renew_lease(created.id, "owner", lease_s=600)
    assert stranger.value.status == 409
    assert (renewed.lease_owner, renewed.lease_expires_at > claimed.lease_expires_at + 500) == ("owner", True)


def test_a_queued_rollout_has_no_lease_to_renew(admin) -> None:
    (created,) = create_rollouts(admin, prefix="lease")
    with pytest.raises(GatewayAPIError) as info:
        admin.renew_lease(created.id, "owner")
    assert (info.value.status, "not running" in str(info.value)) == (409, True)


def test_an_expired_lease_requeues_with_the_next_attempt_then_fails_as_infra(admin) -> None:
    (created,) = create_rollouts(admin, prefix="expire", max_attempts=2)
    (first,) = admin.claim("lost-1", lease_s=0.3)
    time.sleep(0.45)
    (second,) = admin.claim("lost-2", lease_s=0.3)
    time.sleep(0.45)
    assert admin.claim("late") == []
    final = admin.get_rollout(created.id)
    requeues = [e for e in admin.list_events(created.id) if e.payload.get("state") == "queued"]
    assert (first.attempt, second.attempt, second.lease_owner) == (1, 2, "lost-2")
    assert (final.state, final.failure_kind, final.attempt) == (RolloutState.FAILED, FailureKind.INFRA, 2)
    assert "2 attempts spent" in final.error and final.finished_seq is not None
    assert [(e.attempt, "expired" in e.payload["error"], e.payload["reason"]) for e in requeues] == [
        (1, True, "lease_expired")]
    [failed] = [e for e in admin.list_events(created.id) if e.payload.get("state") == "failed"]
    assert (failed.attempt, failed.payload["failure_kind"], failed.payload["reason"]) == (2, "infra", "lease_expired")


def test_an_infra_state_change_carries_its_reason_into_the_state_event(admin) -> None:
    """`reason` (an `InfraReason`) goes with a requeue or an infra failure, into the STATE event's payload; with any
    other change it is refused, naming the field."""
    (created,) = create_rollouts(admin, prefix="reason", max_attempts=2)
    admin.claim("c1")
    admin.set_state(created.id, RolloutState.QUEUED, error="evicted", reason=InfraReason.EVICTED)
    admin.claim("c1")
    with pytest.raises(GatewayAPIError) as refused:
        admin.set_state(created.id, RolloutState.FAILED, FailureKind.AGENT, "exit 1", reason=InfraReason.EVICTED)
    assert refused.value.status == 400 and "reason" in str(refused.value)
    admin.set_state(created.id, RolloutState.FAILED, FailureKind.INFRA, "boom", reason=InfraReason.NODE_LOST)
    states = [(e.attempt, e.payload["state"], e.payload.get("reason")) for e in admin.list_events(created.id)
              if e.kind == EventKind.STATE]
    assert states == [(1, "running", None), (1, "queued", "evicted"), (2, "running", None), (2, "failed", "node_lost")]


def test_requeue_running_to_queued_and_the_next_claim_is_the_next_attempt(admin) -> None:
    (created,) = create_rollouts(admin, prefix="requeue")
    admin.claim("c1")
    requeued = admin.set_state(created.id, RolloutState.QUEUED, error="node lost")
    (again,) = admin.claim("c2")
    assert (requeued.state, requeued.lease_owner, requeued.attempt) == (RolloutState.QUEUED, None, 1)
    assert (again.id, again.attempt, again.lease_owner) == (created.id, 2, "c2")


def test_a_claim_answers_the_key_of_the_attempt_it_claims(gateway, admin) -> None:
    """The controller needs no second request for a key: each claim carries its attempt's base URL and key, which
    calls the rollout's proxy; the submission's key (attempt 0) and an ended attempt's are refused; no repr shows it."""
    (created,) = create_rollouts(admin, prefix="claimkey", max_attempts=2)
    (first,) = admin.claim("c1")
    admin.set_state(created.id, RolloutState.QUEUED, error="evicted")
    (second,) = admin.claim("c2")
    assert (first.base_url, second.base_url) == (created.base_url, created.base_url)
    assert len({created.api_key, first.api_key, second.api_key}) == 3
    statuses = [harness_call(key_of).status_code for key_of in (second, first, created)]
    assert statuses == [200, 409, 409]
    assert second.api_key not in repr(second) and second.api_key not in str([second])


def test_running_to_succeeded_finishes_and_logs_state_events(admin) -> None:
    (created,) = create_rollouts(admin, prefix="ok")
    admin.claim("c1")
    done = admin.set_state(created.id, RolloutState.SUCCEEDED)
    states = [e.payload["state"] for e in admin.list_events(created.id) if e.kind == EventKind.STATE]
    assert (done.state, done.lease_owner, done.finished_seq is not None, done.finished_at >= done.started_at) == (
        RolloutState.SUCCEEDED, None, True, True)
    assert states == ["running", "succeeded"]


def test_failed_needs_a_failure_kind_and_keeps_it(admin) -> None:
    (created,) = create_rollouts(admin, prefix="fail")
    admin.claim("c1")
    failed = admin.set_state(created.id, RolloutState.FAILED, FailureKind.AGENT, "wrong answer format")
    assert (failed.state, failed.failure_kind, failed.error) == (RolloutState.FAILED, FailureKind.AGENT,
                                                                 "wrong answer format")


def test_grader_reward_is_stored_with_its_event(admin, grader) -> None:
    (created,) = create_rollouts(admin, prefix="reward")
    admin.claim("c1")
    rewarded = grader.post_reward(created.id, 0.75, {"tests_passed": 3})
    last = grader.list_events(created.id)[-1]
    admin.set_state(created.id, RolloutState.SUCCEEDED)
    assert rewarded.reward == 0.75
    assert (last.kind, last.payload, last.attempt) == (EventKind.REWARD, {"reward": 0.75,
                                                                          "details": {"tests_passed": 3}}, 1)


def test_events_from_harness_grader_and_controller_are_listed_in_order(admin, grader) -> None:
    (created,) = create_rollouts(admin, prefix="events")
    admin.claim("c1")
    created = current_key(admin, created.id)  # the key of attempt 1
    posted = httpx.post(created.base_url.removesuffix("/v1") + "/events", timeout=30,
                        json={"kind": "agent_output", "payload": {"text": "patch"}},
                        headers={"authorization": f"Bearer {created.api_key}"})
    grader.post_event(created.id, EventKind.LOG, {"line": "graded"})
    events = admin.list_events(created.id)
    assert posted.status_code == 200
    assert [(e.kind, e.attempt) for e in events] == [
        (EventKind.STATE, 1), (EventKind.AGENT_OUTPUT, 1), (EventKind.LOG, 1)]
    assert [e.id for e in events] == sorted(e.id for e in events)
    assert events[1].payload == {"text": "patch"}


def _end_cursor(admin: GatewayClient) -> int:
    cursor = 0
    while (page := admin.finished(after=cursor, limit=1000)).rollouts:
        cursor = page.cursor
    return cursor


def test_finished_pages_follow_the_cursor_in_finishing_order(admin) -> None:
    cursor = _end_cursor(admin)
    created = create_rollouts(admin, 5, prefix="page")
    order = [created[i].id for i in (3, 0, 4, 1, 2)]
    for rollout_id in order:
        admin.set_state(rollout_id, RolloutState.CANCELLED)
    pages = []
    while (page := admin.finished(after=cursor, limit=2)).rollouts:
        pages.append([r.id for r in page.rollouts])
        cursor = page.cursor
    assert pages == [order[:2], order[2:4], order[4:]]
    assert admin.finished(after=cursor, limit=2).cursor == cursor


def test_long_poll_returns_as_soon_as_a_rollout_finishes(gateway, admin) -> None:
    cursor = _end_cursor(admin)
    (created,) = create_rollouts(admin, prefix="poll")
    result: dict = {}

    def wait() -> None:
        with GatewayClient(gateway.url, ADMIN_TOKEN) as client:
            result["page"] = client.finished(after=cursor, wait_s=20)
            result["returned_at"] = time.monotonic()

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.5)
    changed_at = time.monotonic()
    admin.set_state(created.id, RolloutState.CANCELLED)
    waiter.join(30)
    assert [r.id for r in result["page"].rollouts] == [created.id]
    # answered on the change (not before it, and long before wait_s=20 ends), however late a loaded machine runs the
    # thread or the change (with wait_s=5 a starved 2-core machine let the wait end before the change was committed)
    assert 0 <= result["returned_at"] - changed_at < 10, result["returned_at"] - changed_at


def test_long_poll_without_news_waits_its_time_and_returns_empty(admin) -> None:
    cursor = _end_cursor(admin)
    started = time.monotonic()
    page = admin.finished(after=cursor, wait_s=0.5)
    assert (page.rollouts, page.cursor, time.monotonic() - started >= 0.5) == ([], cursor, True)


def test_calls_are_listed_per_attempt_in_arrival_order(admin) -> None:
    (created,) = create_rollouts(admin, prefix="calls")
    admin.claim("c1")
    key_1 = current_key(admin, created.id)
    first = [harness_call(key_1, chat(seed=i)).status_code for i in range(3)]
    admin.set_state(created.id, RolloutState.QUEUED)
    admin.claim("c2")
    key_2 = current_key(admin, created.id)
    second = [harness_call(key_2, chat(seed=10 + i)).status_code for i in range(2)]
    attempt_1, attempt_2 = admin.calls(created.id, attempt=1), admin.calls(created.id, attempt=2)
    everything = admin.calls(created.id)
    assert first + second == [200] * 5
    assert [(c.attempt, c.seq, c.request["seed"]) for c in attempt_1] == [(1, 0, 0), (1, 1, 1), (1, 2, 2)]
    assert [(c.attempt, c.seq, c.request["seed"]) for c in attempt_2] == [(2, 0, 10), (2, 1, 11)]
    assert [c.id for c in everything] == [c.id for c in attempt_1 + attempt_2]
