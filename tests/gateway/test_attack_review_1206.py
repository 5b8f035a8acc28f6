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

from gateway.client import GatewayClient
from gateway.records import FailureKind, RolloutState
from gateway.strict_json import MAX_DEPTH
from tests.controller.support import report_failed_exit
from tests.gateway.api_support import claimed_rollout
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



def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def _post_deep(claimed, levels: int) -> httpx.Response:
    """A chat request with an unknown field nested `levels` arrays deep (dropped before the engine, kept in the
    recorded request): the body's depth is `levels` + 1."""
    raw = ('{"model":"policy","messages":[{"role":"user","content":"hi"}],"junk":' + _deep(levels) + "}").encode()
    return httpx.post(claimed.base_url + "/chat/completions", content=raw, timeout=WAIT_S,
                      headers={"authorization": f"Bearer {claimed.api_key}", "content-type": "application/json"})


def test_a_call_nested_as_deep_as_the_store_keeps_is_read_back(admin) -> None:
    claimed = claimed_rollout(admin, "deep")
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
    claimed = claimed_rollout(admin, "deepfail")
    assert _post_deep(claimed, MAX_DEPTH - 1).status_code == 200
    outcome = report_failed_exit(admin, claimed, tmp_path)
    assert outcome is not None and (outcome.state, outcome.failure_kind) == (RolloutState.FAILED, FailureKind.AGENT)
    rollout = admin.get_rollout(claimed.id)
    assert (rollout.state, rollout.failure_kind, rollout.attempt) == (RolloutState.FAILED, FailureKind.AGENT, 1)
