"""Per-attempt quotas (issue 12, point 5): a rollout key cannot store unlimited calls, artifacts or events. Past a
limit the gateway answers 429 (calls) or 413 (bytes) naming the limit and its setting, and stores nothing more."""

from __future__ import annotations

import httpx
import pytest

from gateway.client import GatewayClient
from tests.gateway.api_support import chat, create_rollouts, error_of, write_config
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway

LIMITS = {"max_calls_per_attempt": 3, "max_artifact_bytes_per_attempt": 1000, "max_event_bytes_per_attempt": 200}


@pytest.fixture(scope="module")
def small(tmp_path_factory, scripted):
    folder = tmp_path_factory.mktemp("quotas")
    gw = InProcessGateway(folder / "store.db", config_path=write_config(folder / "gw.yaml", **LIMITS)).start()
    with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
        admin.register_model("policy", scripted.base_url)
        yield gw, admin
    gw.stop()


def harness(created, method: str, path: str, **kwargs) -> httpx.Response:
    return httpx.request(method, created.base_url.removesuffix("/v1") + path, timeout=30,
                         headers={"authorization": f"Bearer {created.api_key}"}, **kwargs)


def test_calls_past_the_quota_are_429_and_not_forwarded(small) -> None:
    _, admin = small
    (created,) = create_rollouts(admin, prefix="calls")
    statuses = [harness(created, "POST", "/v1/chat/completions", json=chat()).status_code for _ in range(3)]
    error = error_of(harness(created, "POST", "/v1/chat/completions", json=chat()), 429)
    assert statuses == [200] * 3 and len(admin.calls(created.id)) == 3
    assert error["code"] == "quota_exceeded" and "max_calls_per_attempt" in error["message"] and "3" in error["message"]


def test_artifacts_past_the_quota_are_413_and_a_replacement_counts_once(small) -> None:
    _, admin = small
    (created,) = create_rollouts(admin, prefix="arts")
    first = harness(created, "PUT", "/artifacts/a.bin", content=b"x" * 600)
    replaced = harness(created, "PUT", "/artifacts/a.bin", content=b"y" * 900)  # replaces a.bin: 900 in all
    error = error_of(harness(created, "PUT", "/artifacts/b.bin", content=b"z" * 200), 413)
    assert (first.status_code, replaced.status_code) == (200, 200)
    assert error["code"] == "artifact_quota_exceeded" and "max_artifact_bytes_per_attempt" in error["message"]
    with pytest.raises(Exception, match="404"):
        admin.get_artifact(created.id, "b.bin")


def test_events_past_the_quota_are_413(small) -> None:
    _, admin = small
    (created,) = create_rollouts(admin, prefix="events")
    event = {"kind": "log", "payload": {"line": "x" * 80}}
    statuses = [harness(created, "POST", "/events", json=event).status_code for _ in range(2)]
    error = error_of(harness(created, "POST", "/events", json=event), 413)
    assert statuses == [200, 200] and len(admin.list_events(created.id)) == 2
    assert error["code"] == "event_quota_exceeded" and "max_event_bytes_per_attempt" in error["message"]
