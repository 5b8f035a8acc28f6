"""Attack review of the byte-bounded pages of an attempt's calls (ebfaa0e).

A harness may send a request nested as deep as the store keeps (`strict_json.MAX_DEPTH`, 254 levels): the gateway
records it. `GatewayClient.calls` then parsed each page with pydantic's JSON parser, whose recursion limit (about 200
levels) is below that, so reading the attempt's calls raised; the controller's `report_attempt` raised with it, the
lease expired and the gateway requeued the rollout: the policy's failure made an infra retry (and the trainer's feed,
which reads the calls the same way, failed too). The page is read with the JSON parser the client used before.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from controller.attempt import Attempt
from controller.report import report_attempt
from controller.runners.base import RunResult, RunSpec, Termination
from gateway.client import GatewayClient
from gateway.records import FailureKind, RolloutSpec, RolloutState
from gateway.strict_json import MAX_DEPTH
from tests.controller.support import ScriptRecipe
from tests.gateway.api_support import new_id
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway

WAIT_S = 30.0


@pytest.fixture(scope="module")
def admin(tmp_path_factory, scripted) -> Iterator[GatewayClient]:
    gateway = InProcessGateway(tmp_path_factory.mktemp("attack1206") / "store.db").start()
    try:
        with GatewayClient(gateway.url, ADMIN_TOKEN) as client:
            client.register_model("policy", scripted.base_url, version=3)
            yield client
    finally:
        gateway.stop()


def _claimed(admin: GatewayClient, prefix: str):
    rollout_id = new_id(prefix)
    admin.create_rollouts([RolloutSpec(id=rollout_id, group_id=new_id("g"))])
    (claimed,) = [r for r in admin.claim("ctl", limit=1000, lease_s=600) if r.id == rollout_id]
    return claimed


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def _post_deep(claimed, levels: int) -> httpx.Response:
    """A chat request with an unknown field nested `levels` arrays deep (dropped before the engine, kept in the
    recorded request): the body's depth is `levels` + 1."""
    raw = ('{"model":"policy","messages":[{"role":"user","content":"hi"}],"junk":' + _deep(levels) + "}").encode()
    return httpx.post(claimed.base_url + "/chat/completions", content=raw, timeout=WAIT_S,
                      headers={"authorization": f"Bearer {claimed.api_key}", "content-type": "application/json"})


def test_a_call_nested_as_deep_as_the_store_keeps_is_read_back(admin) -> None:
    claimed = _claimed(admin, "deep")
    answer = _post_deep(claimed, MAX_DEPTH - 1)
    assert answer.status_code == 200, answer.text[:300]
    (call,) = admin.calls(claimed.id, attempt=1)
    junk = call.request["junk"]
    for _ in range(MAX_DEPTH - 2):
        (junk,) = junk
    assert junk == []


def test_a_deep_request_does_not_turn_the_agents_failure_into_a_retry(admin, tmp_path: Path) -> None:
    """The harness records one deep call and exits non-zero: the agent's failure on the first attempt, reported (not an
    exception that leaves the lease to expire and the rollout to be requeued)."""
    claimed = _claimed(admin, "deepfail")
    assert _post_deep(claimed, MAX_DEPTH - 1).status_code == 200
    workdir = tmp_path / "work"
    workdir.mkdir()
    spec = RunSpec(rollout_id=claimed.id, attempt=1, command=("true",), base_url="", api_key="", task={},
                   workdir=workdir, timeout_s=1, stdout_path=tmp_path / "o", stderr_path=tmp_path / "e")
    result = RunResult(claimed.id, 1, Termination.EXITED, 1, "exited with code 1", 0.1)
    outcome = report_attempt(Attempt(claimed, ScriptRecipe(), spec), result, admin, admin, "ctl", 600.0)
    assert outcome is not None and (outcome.state, outcome.failure_kind) == (RolloutState.FAILED, FailureKind.AGENT)
    rollout = admin.get_rollout(claimed.id)
    assert (rollout.state, rollout.failure_kind, rollout.attempt) == (RolloutState.FAILED, FailureKind.AGENT, 1)
