"""A rollout's request bodies in flight are bounded on the served gateway: a body declared and trickled holds its
rollout's share until its connection ends, and another rollout is not affected (gateway/request_bytes.py; the
bookkeeping in unit/test_request_bytes.py)."""

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


@pytest.fixture
def gateway(tmp_path):
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({"max_request_bytes_in_flight_per_rollout": SHARE}))
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
