"""Writes fenced by attempt (issue 12, point 4), against a real gateway: a reward or state write for an attempt that is
not current, or from a controller without the lease, is refused with 409 and changes nothing; a finished rollout's
reward is final; a requeue drops the ended attempt's reward; a rollout key works only for its own live attempt."""

from __future__ import annotations

import time

import httpx
import pytest

from gateway.client import GatewayAPIError
from gateway.records import EventKind, FailureKind, RolloutState
from tests.gateway.api_support import chat, create_rollouts, current_key, error_of


@pytest.fixture(autouse=True)
def empty_queue(admin):
    """Claim and cancel whatever is queued, so each test's claims see only its own rollouts."""
    while batch := admin.claim("sweeper", limit=1000, lease_s=3600):
        for rollout in batch:
            admin.set_state(rollout.id, RolloutState.CANCELLED)


def refused(code: str, write) -> GatewayAPIError:
    with pytest.raises(GatewayAPIError) as raised:
        write()
    assert (raised.value.status, raised.value.code) == (409, code), raised.value
    return raised.value


def test_a_reward_posted_for_attempt_1_does_not_survive_a_requeue(admin, grader) -> None:
    (created,) = create_rollouts(admin, prefix="fence")
    admin.claim("c1")
    grader.post_reward(created.id, 1.0, attempt=1, controller_id="c1")
    requeued = admin.set_state(created.id, RolloutState.QUEUED, error="node lost", attempt=1, controller_id="c1")
    (second,) = admin.claim("c2")
    refused("stale_attempt", lambda: grader.post_reward(created.id, 1.0, attempt=1, controller_id="c1"))
    failed = admin.set_state(created.id, RolloutState.FAILED, FailureKind.AGENT, "wrong", attempt=2,
                             controller_id="c2")
    assert (requeued.reward, second.attempt, failed.reward) == (None, 2, None)


def test_a_lease_expiry_requeue_drops_the_reward_too(admin, grader) -> None:
    (created,) = create_rollouts(admin, prefix="fence-exp")
    admin.claim("c1", lease_s=0.2)
    grader.post_reward(created.id, 1.0, attempt=1, controller_id="c1")
    time.sleep(0.3)
    (second,) = admin.claim("c2")
    assert (second.id, second.attempt, second.reward) == (created.id, 2, None)
    refused("lease_lost", lambda: grader.post_reward(created.id, 1.0, controller_id="c1"))
    refused("stale_attempt", lambda: admin.set_state(created.id, RolloutState.SUCCEEDED, attempt=1,
                                                     controller_id="c1"))
    assert admin.get_rollout(created.id).state == RolloutState.RUNNING


def test_a_controller_without_the_lease_changes_nothing(admin, grader) -> None:
    (created,) = create_rollouts(admin, prefix="fence-lease")
    admin.claim("owner")
    events_before = len(admin.list_events(created.id))
    refused("lease_lost", lambda: grader.post_reward(created.id, 0.5, attempt=1, controller_id="intruder"))
    refused("lease_lost", lambda: admin.set_state(created.id, RolloutState.SUCCEEDED, attempt=1,
                                                  controller_id="intruder"))
    after = admin.get_rollout(created.id)
    assert (after.state, after.reward, after.lease_owner) == (RolloutState.RUNNING, None, "owner")
    assert len(admin.list_events(created.id)) == events_before


def test_a_finished_rollouts_reward_is_final_and_the_same_value_is_idempotent(admin, grader) -> None:
    (created,) = create_rollouts(admin, prefix="fence-final")
    admin.claim("c1")
    grader.post_reward(created.id, 0.25, attempt=1, controller_id="c1")
    admin.set_state(created.id, RolloutState.SUCCEEDED, attempt=1, controller_id="c1")
    again = grader.post_reward(created.id, 0.25, attempt=1)
    error = refused("reward_final", lambda: grader.post_reward(created.id, 1.0))
    rewards = [e for e in admin.list_events(created.id) if e.kind == EventKind.REWARD]
    assert (again.reward, admin.get_rollout(created.id).reward, len(rewards)) == (0.25, 0.25, 1)
    assert "0.25" in str(error) and "final" in str(error)


def test_a_finished_rollout_without_a_reward_takes_none_later(admin, grader) -> None:
    (created,) = create_rollouts(admin, prefix="fence-late")
    admin.claim("c1")
    admin.set_state(created.id, RolloutState.FAILED, FailureKind.AGENT, "gave up", attempt=1)
    refused("reward_final", lambda: grader.post_reward(created.id, 1.0))
    assert admin.get_rollout(created.id).reward is None


def harness(created, method: str, path: str, **kwargs) -> httpx.Response:
    return httpx.request(method, created.base_url.removesuffix("/v1") + path,
                         headers={"authorization": f"Bearer {created.api_key}"}, timeout=30, **kwargs)


HARNESS_WRITES = {
    "call": ("POST", "/v1/chat/completions", {"json": chat()}),
    "artifact": ("PUT", "/artifacts/result.tar.gz", {"content": b"forged"}),
    "event": ("POST", "/events", {"json": {"kind": "agent_output", "payload": {"text": "x"}}}),
}


@pytest.mark.parametrize("write", HARNESS_WRITES, ids=HARNESS_WRITES.keys())
def test_an_orphaned_harness_of_a_requeued_attempt_records_nothing(admin, write) -> None:
    """The attack: an orphaned harness of an expired lease recorded calls and uploaded artifacts into the next
    attempt. Its key is bound to attempt 1: refused while requeued and after the next claim."""
    (created,) = create_rollouts(admin, prefix="orphan")
    admin.claim("c1")
    first = current_key(admin, created.id)
    method, path, kwargs = HARNESS_WRITES[write]
    assert harness(first, method, path, **kwargs).status_code == 200
    admin.set_state(created.id, RolloutState.QUEUED, error="lease lost", attempt=1, controller_id="c1")
    assert error_of(harness(first, method, path, **kwargs), 409)["code"] == "stale_attempt"
    admin.claim("c2")
    error = error_of(harness(first, method, path, **kwargs), 409)
    second = current_key(admin, created.id)
    assert error["code"] == "stale_attempt" and "attempt 1" in error["message"]
    assert admin.calls(created.id, attempt=2) == []
    assert [e for e in admin.list_events(created.id) if e.attempt == 2 and e.kind == EventKind.AGENT_OUTPUT] == []
    with pytest.raises(GatewayAPIError, match="404"):
        admin.get_artifact(created.id, "result.tar.gz", attempt=2)
    assert second.api_key != first.api_key
    assert harness(second, method, path, **kwargs).status_code == 200


def test_the_key_handed_out_before_the_claim_is_not_the_running_attempts(admin) -> None:
    (created,) = create_rollouts(admin, prefix="prekey")
    assert harness(created, "POST", "/v1/chat/completions", json=chat()).status_code == 200  # attempt 0: direct use
    admin.claim("c1")
    assert error_of(harness(created, "POST", "/v1/chat/completions", json=chat()), 409)["code"] == "stale_attempt"
    assert harness(current_key(admin, created.id), "POST", "/v1/chat/completions", json=chat()).status_code == 200
