"""Connections past the limits are refused on a real socket to the served gateway, and their places come back when
connections close (gateway/connection_limits.py; the bookkeeping and the protocol are tested one by one in
unit/test_connection_limits.py and unit/test_http_protocol.py)."""

from __future__ import annotations

import contextlib
import json
import socket
import time

import pytest
import yaml

from tests.inprocess import InProcessGateway

HEALTH = b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n"


@pytest.fixture
def served(tmp_path):
    """An in-process gateway with the given settings (loopback is the tests' only network: nothing exempt)."""
    gateways = []

    def start(**settings) -> InProcessGateway:
        config = tmp_path / f"gateway-{len(gateways)}.yaml"
        config.write_text(yaml.safe_dump({"connection_limit_exempt": [], **settings}))
        gateways.append(InProcessGateway(db_path=tmp_path / f"store-{len(gateways)}.db", config_path=config).start())
        return gateways[-1]

    yield start
    for gateway in gateways:
        gateway.stop()


def _connect(gateway: InProcessGateway, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", gateway.port), timeout=10, source_address=(source, 0))


def _ask(sock: socket.socket, *, send: bool = True) -> tuple[int, bytes]:
    """Send a health check on `sock` (unless not `send`: a refusal is written on arrival) and read one answer: its
    status and body."""
    if send:
        sock.sendall(HEALTH)
    answer = b""
    with contextlib.suppress(ConnectionResetError):
        while b"\r\n\r\n" not in answer or len(answer.split(b"\r\n\r\n", 1)[1]) < _length(answer):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def _length(answer: bytes) -> int:
    for line in answer.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def _eventually_served(gateway: InProcessGateway, source: str = "127.0.0.1", timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with _connect(gateway, source) as sock:
            if _ask(sock)[0] == 200:
                return True
        time.sleep(0.05)
    return False


def test_an_address_past_its_connection_limit_is_429_and_its_place_comes_back_when_one_closes(served):
    gateway = served(max_connections_per_client=3)
    held = [_connect(gateway) for _ in range(3)]
    try:
        assert all(_ask(sock)[0] == 200 for sock in held), "connections up to the limit are served (and kept alive)"
        with _connect(gateway) as extra:
            status, body = _ask(extra)
        assert status == 429 and json.loads(body)["error"]["code"] == "too_many_connections"
        with _connect(gateway, source="127.0.0.2") as other:  # another client address has its own count
            assert _ask(other)[0] == 200
        held.pop().close()
        assert _eventually_served(gateway), "the closed connection's place was not given back"
    finally:
        for sock in held:
            sock.close()


def test_past_the_process_total_a_new_connection_is_503(served):
    gateway = served(max_connections_per_client=0, max_connections=4)
    held = [_connect(gateway, source=f"127.0.0.{i + 1}") for i in range(4)]
    try:
        assert all(_ask(sock)[0] == 200 for sock in held)
        with _connect(gateway, source="127.0.0.9") as extra:  # closed at once: read what was written on arrival
            status, body = _ask(extra, send=False)
        assert status == 503 and json.loads(body)["error"]["code"] == "gateway_at_connection_limit"
        held.pop().close()
        assert _eventually_served(gateway, source="127.0.0.9")
    finally:
        for sock in held:
            sock.close()


def test_websocket_upgrades_do_not_keep_their_places(served):
    """The gateway serves no WebSocket: an upgrade is answered by its route and its connection's place comes back
    (uvicorn's WebSocket hand-over kept it for good: 8 upgrades locked an address out)."""
    gateway = served(max_connections_per_client=3)
    upgrade = (b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: websocket\r\n"
               b"sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
    for _ in range(10):
        with _connect(gateway) as sock:
            sock.sendall(upgrade)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
    assert _eventually_served(gateway)
