"""The gateway route: only `/r/{this rollout}/...` passes, from inside a real sandbox through the loopback relay."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sandbox import GatewayRoute, Network, run_command
from sandbox.forwarder import GatewayForwarder, Refused, parse_head, target_pattern
from tests.sandbox.support import python_spec

ALLOWED = target_pattern("r1")


def head(target: str, *headers: str) -> bytes:
    return "\r\n".join([f"POST {target} HTTP/1.1", "Host: x", *headers]).encode()


def test_parse_head_passes_this_rollouts_path_and_drops_hop_by_hop_headers():
    request = parse_head(head("/r/r1/v1/chat/completions?x=1", "Content-Length: 12", "Authorization: Bearer k",
                              "Connection: keep-alive"), ALLOWED)
    assert (request.method, request.target, request.body_bytes) == ("POST", "/r/r1/v1/chat/completions?x=1", 12)
    assert request.headers == (("Content-Length", "12"), ("Authorization", "Bearer k"))


@pytest.mark.parametrize(("target", "status"), [
    ("/r/r2/v1/chat/completions", 403),  # another rollout
    ("/r/r1x/v1/models", 403),  # a rollout whose id starts with ours
    ("/admin/rollouts", 403), ("/v1/models", 403), ("/health", 403), ("/update_weights", 403),  # admin, engine
    ("/r/r1/../../admin/rollouts", 403), ("/r/r1/v1/%2e%2e/%2e%2e/admin", 403), ("/r/r1//admin", 403),
    ("http://127.0.0.1:8000/admin/rollouts", 403), ("*", 403),
])
def test_parse_head_refuses_other_targets(target, status):
    with pytest.raises(Refused) as refused:
        parse_head(head(target), ALLOWED)
    assert refused.value.status == status


@pytest.mark.parametrize("extra", [["Transfer-Encoding: chunked"], ["Content-Length: 1", "Content-Length: 2"],
                                   ["Content-Length: -1"], [" Bad: header"]])
def test_parse_head_refuses_ambiguous_bodies(extra):
    with pytest.raises(Refused):
        parse_head(head("/r/r1/v1/models", *extra), ALLOWED)


class Upstream:
    """A fake gateway that records every request it gets and echoes the path and body."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.seen.append(self.path)
                answer = json.dumps({"path": self.path, "body": body.decode()}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_GET = do_POST  # noqa: N815

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        self.port = self.server.server_address[1]


CLIENT = """
import json, sys, urllib.request, urllib.error, socket
for path in sys.argv[2:]:
    request = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}{path}", data=b'{"x": 1}', method="POST")
    try:
        print(path, urllib.request.urlopen(request, timeout=10).status)
    except urllib.error.HTTPError as e:
        print(path, e.code)
    except OSError as e:
        print(path, "unreachable")
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="starts sandboxes as root")
def test_only_this_rollouts_gateway_path_is_reachable_from_inside(tmp_path):
    upstream = Upstream()
    engine = Upstream()  # stands for the engine / admin API on the host's loopback
    sock = tmp_path / "fw" / "r1.sock"
    sock.parent.mkdir()
    with GatewayForwarder(sock, "127.0.0.1", upstream.port, "r1") as forwarder:
        route = GatewayRoute(socket=sock, port=18080, python=Path(sys.executable))
        spec = python_spec(tmp_path, network=Network.GATEWAY, gateway=route)
        paths = ["/r/r1/v1/chat/completions", "/r/r2/v1/chat/completions", "/admin/rollouts",
                 "/r/r1/../admin/rollouts"]
        result = run_command(spec, [sys.executable, "-c", CLIENT, "18080", *paths], 30)
        direct = run_command(spec, [sys.executable, "-c", CLIENT, str(engine.port), "/v1/models",
                                    "/r/r1/v1/x"], 30)
    assert result.returncode == 0, result.output
    lines = dict(line.rsplit(" ", 1) for line in result.output.splitlines())
    assert lines == {"/r/r1/v1/chat/completions": "200", "/r/r2/v1/chat/completions": "403",
                     "/admin/rollouts": "403", "/r/r1/../admin/rollouts": "403"}
    assert upstream.seen == ["/r/r1/v1/chat/completions"] and forwarder.refused == 3
    assert direct.output.split() == ["/v1/models", "unreachable", "/r/r1/v1/x", "unreachable"]
    assert engine.seen == []
    upstream.server.shutdown()
    engine.server.shutdown()


def test_connections_are_bounded_and_the_gateway_down_is_a_502(tmp_path, monkeypatch):
    import sandbox.forwarder as forwarder_module

    monkeypatch.setattr(forwarder_module, "MAX_CONNECTIONS", 2)
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: the gateway is down
    sock = tmp_path / "fw.sock"
    with GatewayForwarder(sock, "127.0.0.1", port, "r1"):
        idle = []
        for _ in range(2):  # hold both slots with connections that never send a request
            idle.append(socket.socket(socket.AF_UNIX))
            idle[-1].connect(str(sock))
        extra = socket.socket(socket.AF_UNIX)
        extra.connect(str(sock))
        assert extra.recv(4096).startswith(b"HTTP/1.1 503")
        for conn in idle:
            conn.close()
        deadline = time.monotonic() + 5
        while True:
            late = socket.socket(socket.AF_UNIX)
            late.connect(str(sock))
            try:
                late.sendall(head("/r/r1/v1/models", "Content-Length: 0") + b"\r\n\r\n")
                answer = late.recv(4096)
            except (BrokenPipeError, ConnectionResetError):  # refused (503) and closed before the request was sent:
                answer = b"HTTP/1.1 503"  # the forwarder has not yet seen the idle connections close
            late.close()
            if not answer.startswith(b"HTTP/1.1 503") or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert answer.startswith(b"HTTP/1.1 502") and b"unreachable" in answer
