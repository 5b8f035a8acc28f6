"""A rollout's request bodies in flight are bounded on the served gateway: a body declared and trickled holds its
rollout's share until its connection ends, and another rollout is not affected; a JSON body whose parse would take
more than the share is refused before it is parsed, and a call past its attempt's call bytes before it is parsed
(gateway/request_bytes.py, strict_json.parse_bytes; the bookkeeping in unit/test_request_bytes.py)."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlparse

import httpx
import pytest
import yaml

from gateway.client import GatewayClient
from tests.gateway.api_support import create_rollouts
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway

SHARE = 100_000
CALL_BYTES = 150_000


@pytest.fixture
def gateway(tmp_path):
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({"max_request_bytes_in_flight_per_rollout": SHARE,
                                      "max_call_bytes_per_attempt": CALL_BYTES}))
    gw = InProcessGateway(db_path=tmp_path / "store.db", config_path=config).start()
    yield gw
    gw.stop()


def _put(created, name: str, size: int) -> httpx.Response:
    url = created.base_url.removesuffix("/v1") + f"/artifacts/{name}"
    return httpx.put(url, content=b"x" * size, headers={"authorization": f"Bearer {created.api_key}"}, timeout=30)


def test_a_trickled_body_holds_its_rollouts_share_until_its_connection_ends(gateway):
    with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
        mine, other = create_rollouts(admin, 2)
    target = urlparse(mine.base_url.removesuffix("/v1") + "/artifacts/slow")
    with socket.create_connection((target.hostname, target.port), timeout=10) as trickling:
        trickling.sendall(f"PUT {target.path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {mine.api_key}\r\n"
                          f"content-length: 80000\r\n\r\n".encode() + b"x" * 50_000)  # 30,000 bytes never sent
        deadline = time.monotonic() + 10
        while (refused := _put(mine, "next", 30_000)).status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.05)  # until the trickled request is being read (its 80,000 declared bytes charged)
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "request_bytes_in_flight"
        assert _put(mine, "small", 10_000).status_code == 200, "what is left of the share is usable"
        assert _put(other, "next", 90_000).status_code == 200, "another rollout has its own share"
    deadline = time.monotonic() + 10
    while _put(mine, "next", 30_000).status_code != 200:
        assert time.monotonic() < deadline, "the ended connection's bytes were never released"
        time.sleep(0.05)


def _post(created, path: str, body: bytes) -> httpx.Response:
    return httpx.post(created.base_url + path, content=body, timeout=30,
                      headers={"authorization": f"Bearer {created.api_key}", "content-type": "application/json"})


@pytest.mark.parametrize("path", ["/chat/completions", "/messages", "/responses", "/messages/count_tokens",
                                  "/../events"])
def test_a_body_of_tiny_values_is_refused_before_it_is_parsed(gateway, path):
    with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
        (mine,) = create_rollouts(admin, 1)
    body = b'{"model":"m","messages":[' + b",".join([b"{}"] * 10_000) + b"]}"  # 30 KB, about 2.6 MB parsed
    refused = _post(mine, path, body)
    assert refused.status_code == 413, refused.text
    error = refused.json().get("error") or refused.json()
    assert "request_too_costly" in refused.text and "max_request_bytes_in_flight_per_rollout" in refused.text, error
    assert _put(mine, "after", 90_000).status_code == 200, "the refused request's charge was released"


def test_a_call_past_its_attempts_call_bytes_is_refused_before_its_body_is_parsed(gateway):
    with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
        (mine,) = create_rollouts(admin, 1)
    not_json = b"x" * 30_000  # parsed, a 400; counted first
    for _ in range(5):
        assert _post(mine, "/chat/completions", not_json).status_code == 400
    refused = _post(mine, "/chat/completions", not_json)  # 180,000 bytes would pass the 150,000 of the attempt
    assert refused.status_code == 413 and refused.json()["error"]["code"] == "call_bytes_quota_exceeded"


def test_a_refusal_of_the_parse_charge_leaves_the_attempts_call_bytes_uncounted(gateway):
    """A 429 for the rollout's requests in flight is retried as it says: it must not spend the attempt's budget."""
    with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
        (mine,) = create_rollouts(admin, 1)
    dense = b'{"model":"m","messages":[' + b",".join([b"{}"] * 10_000) + b"]}"  # refused for its parse each time
    for _ in range(6):  # 6 x 30 KB would pass the attempt's 150,000 bytes had they been counted
        assert _post(mine, "/chat/completions", dense).status_code == 413
    assert _post(mine, "/chat/completions", b"x" * 30_000).status_code == 400, "the budget was spent"
