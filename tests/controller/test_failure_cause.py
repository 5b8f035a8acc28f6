"""A policy cannot turn its own failure into an infrastructure failure (issue 27, point 3), end to end: a real gateway
in front of the hostile upstream, harness processes through the LocalRunner, the controller's classification. A
harness that exits non-zero after an answer the model caused, after a 4xx or the engine's own error, or after an
answer longer than the gateway's timeout, is the agent's failure on its first attempt, never requeued; after the
engine could not be reached it is still infra, retried."""

from __future__ import annotations

import orjson
import pytest

from gateway.client import GatewayClient
from gateway.records import EventKind, FailureKind, RolloutState
from tests.controller.test_reconcile import create, events, reconcile_all
from tests.gateway.hostile_upstream import (
    IMPATIENT_TIMEOUT_S,
    NEVER_S,
    PATIENT_TIMEOUT_S,
    Answer,
    HostileUpstream,
    hostile_gateway,
)
from tests.gateway.support import ADMIN_TOKEN, GRADER_TOKEN

pytestmark = pytest.mark.slow  # harness processes through the LocalRunner

MESSAGES = {"path": "/messages", "body": {"model": "policy", "max_tokens": 16,
                                          "messages": [{"role": "user", "content": "fix it"}]}}
CHAT = {"path": "/chat/completions", "body": {"model": "policy", "messages": [{"role": "user", "content": "fix it"}]}}


def unary_tool_call(arguments: str) -> Answer:
    call = {"id": "call_0", "type": "function", "function": {"name": "Bash", "arguments": arguments}}
    return Answer((orjson.dumps({"id": "c1", "prompt_token_ids": [1, 2], "choices": [
        {"index": 0, "message": {"content": None, "tool_calls": [call]}, "token_ids": [7, 8],
         "finish_reason": "length"}]}),))


@pytest.fixture(scope="module")
def upstream():
    upstream = HostileUpstream().start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def patient(tmp_path_factory, upstream):
    """A gateway that waits for any answer a loopback upstream gives under load (`hostile_gateway`)."""
    with hostile_gateway(tmp_path_factory.mktemp("cause"), upstream, PATIENT_TIMEOUT_S) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def impatient(tmp_path_factory, upstream):
    """A gateway with a 1 s upstream timeout, for the answer that outlasts it."""
    with hostile_gateway(tmp_path_factory.mktemp("cause-timeout"), upstream, IMPATIENT_TIMEOUT_S) as gateway:
        yield gateway


AGENT_CASES = {
    "(b) a Messages tool call whose arguments are cut at max tokens": (
        unary_tool_call('{"command": "ls'), MESSAGES, "patient"),
    "(b) a Messages tool call whose arguments are a list": (unary_tool_call('["ls"]'), MESSAGES, "patient"),
    "(c) the context is full: the engine's 400": (
        Answer((b'{"error": {"message": "maximum context length is 8192 tokens"}}',), status=400), CHAT, "patient"),
    "(c) the engine's context error in a 200 body (502 to a Messages harness)": (
        Answer((b'{"error": {"message": "maximum context length is 8192 tokens"}}',)), MESSAGES, "patient"),
    "(c) an answer longer than the gateway's timeout": (
        Answer((b'{"id": ', b'"c1"}'), pause_s=NEVER_S), CHAT, "impatient"),
}


@pytest.mark.parametrize(("answer", "call", "gateway"), AGENT_CASES.values(), ids=AGENT_CASES.keys())
def test_a_harness_exiting_after_what_the_policy_caused_is_the_agents_failure_on_its_first_attempt(
        request, upstream, tmp_path, answer, call, gateway) -> None:
    gateway = request.getfixturevalue(gateway)
    upstream.answer = answer
    with GatewayClient(gateway.url, ADMIN_TOKEN) as admin, GatewayClient(gateway.url, GRADER_TOKEN) as grader:
        [rollout_id] = create(admin, [{"mode": "post_then_fail", **call}], max_attempts=3)
        reconcile_all(gateway, grader, tmp_path)
        rollout = admin.get_rollout(rollout_id)
        assert (rollout.state, rollout.failure_kind, rollout.attempt) == (
            RolloutState.FAILED, FailureKind.AGENT, 1), rollout.error
        assert [e["state"] for e in events(admin, rollout_id, EventKind.STATE)] == ["running", "failed"]
        [recorded] = admin.calls(rollout_id)
        assert recorded.error_code is not None


def test_d_a_harness_exiting_after_the_engine_did_not_answer_is_infra_retried(patient, tmp_path) -> None:
    with GatewayClient(patient.url, ADMIN_TOKEN) as admin, GatewayClient(patient.url, GRADER_TOKEN) as grader:
        [rollout_id] = create(admin, [{"mode": "post_then_fail", "path": "/chat/completions",
                                       "body": {**CHAT["body"], "model": "dead"}}], max_attempts=2)
        reconcile_all(patient, grader, tmp_path)
        rollout = admin.get_rollout(rollout_id)
        assert (rollout.state, rollout.failure_kind, rollout.attempt) == (RolloutState.FAILED, FailureKind.INFRA, 2)
        assert "502 [upstream_unavailable] (engine unreachable)" in rollout.error
        assert [e["state"] for e in events(admin, rollout_id, EventKind.STATE)] == [
            "running", "queued", "running", "failed"]
