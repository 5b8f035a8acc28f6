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
from tests.gateway.api_support import write_config
from tests.gateway.hostile_upstream import Answer, HostileUpstream
from tests.gateway.support import ADMIN_TOKEN, GRADER_TOKEN, free_port
from tests.inprocess import InProcessGateway

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
def hostile_gateway(tmp_path_factory):
    """A gateway (one upstream try, a 1 s upstream timeout) with the hostile upstream as `policy`, a closed port as
    `dead`."""
    folder = tmp_path_factory.mktemp("cause")
    upstream = HostileUpstream().start()
    gateway = InProcessGateway(folder / "store.db", config_path=write_config(
        folder / "gw.yaml", retry_attempts=1, upstream_timeout_s=1.0)).start()
    with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
        admin.register_model("policy", upstream.base_url, version=1)
        admin.register_model("dead", f"http://127.0.0.1:{free_port()}/v1", version=1)
    yield gateway, upstream
    gateway.stop()
    upstream.stop()


@pytest.fixture
def hostile_admin(hostile_gateway):
    with GatewayClient(hostile_gateway[0].url, ADMIN_TOKEN) as client:
        yield client


@pytest.fixture
def hostile_grader(hostile_gateway):
    with GatewayClient(hostile_gateway[0].url, GRADER_TOKEN) as client:
        yield client


AGENT_CASES = {
    "(b) a Messages tool call whose arguments are cut at max tokens": (unary_tool_call('{"command": "ls'), MESSAGES),
    "(b) a Messages tool call whose arguments are a list": (unary_tool_call('["ls"]'), MESSAGES),
    "(c) the context is full: the engine's 400": (
        Answer((b'{"error": {"message": "maximum context length is 8192 tokens"}}',), status=400), CHAT),
    "(c) the engine's context error in a 200 body (502 to a Messages harness)": (
        Answer((b'{"error": {"message": "maximum context length is 8192 tokens"}}',)), MESSAGES),
    "(c) an answer longer than the gateway's timeout": (Answer((b'{"id": ', b'"c1"}'), pause_s=2.0), CHAT),
}


@pytest.mark.parametrize(("answer", "call"), AGENT_CASES.values(), ids=AGENT_CASES.keys())
def test_a_harness_exiting_after_what_the_policy_caused_is_the_agents_failure_on_its_first_attempt(
        hostile_gateway, hostile_admin, hostile_grader, tmp_path, answer, call) -> None:
    hostile_gateway[1].answer = answer
    [rollout_id] = create(hostile_admin, [{"mode": "post_then_fail", **call}], max_attempts=3)
    reconcile_all(hostile_gateway[0], hostile_grader, tmp_path)
    rollout = hostile_admin.get_rollout(rollout_id)
    assert (rollout.state, rollout.failure_kind, rollout.attempt) == (RolloutState.FAILED, FailureKind.AGENT, 1), \
        rollout.error
    assert [e["state"] for e in events(hostile_admin, rollout_id, EventKind.STATE)] == ["running", "failed"]
    [recorded] = hostile_admin.calls(rollout_id)
    assert recorded.error_code is not None


def test_d_a_harness_exiting_after_the_engine_did_not_answer_is_infra_retried(
        hostile_gateway, hostile_admin, hostile_grader, tmp_path) -> None:
    [rollout_id] = create(hostile_admin, [{"mode": "post_then_fail", "path": "/chat/completions",
                                           "body": {**CHAT["body"], "model": "dead"}}], max_attempts=2)
    reconcile_all(hostile_gateway[0], hostile_grader, tmp_path)
    rollout = hostile_admin.get_rollout(rollout_id)
    assert (rollout.state, rollout.failure_kind, rollout.attempt) == (RolloutState.FAILED, FailureKind.INFRA, 2)
    assert "502 [upstream_unavailable] (engine unreachable)" in rollout.error
    assert [e["state"] for e in events(hostile_admin, rollout_id, EventKind.STATE)] == [
        "running", "queued", "running", "failed"]
