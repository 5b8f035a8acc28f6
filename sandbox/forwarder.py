"""Outside the sandbox: a unix socket that passes one rollout's gateway requests upstream, and nothing else.

Each connection carries exactly one request: its target must be `/r/{rollout id}/...` (no `..`, no percent-escapes,
no absolute form), its body a Content-Length one (no chunked uploads); it is sent to the gateway with
`Connection: close` and the answer is relayed back as it streams. Anything else gets a 403 or 400 JSON error and never
reaches the gateway. The engine, the admin API, other rollouts and DNS are unreachable through it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import socketserver
import threading
import time
from dataclasses import dataclass
from pathlib import Path

MAX_HEAD_BYTES = 64 * 1024
UPSTREAM_TIMEOUT_S = 3600.0  # the longest silence of the gateway on one call (a slow generation)
CLIENT_TIMEOUT_S = 60.0  # the longest silence of the sandbox while it sends a request
LINGER_S, LINGER_BYTES = 1.0, 1024 * 1024  # after a refusal: how long in all, and how much, of the body is read
MAX_CONNECTIONS = 64  # connections served at once per forwarder (one thread each); more are answered 503
SAFE_PATH = r"[A-Za-z0-9._~!$&'()*+,;=:@/-]*"
SAFE_QUERY = r"(\?[A-Za-z0-9._~!$&'()*+,;=:@/?%-]*)?"
DROPPED_HEADERS = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "upgrade", "te", "host",
                   "transfer-encoding", "expect"}


@dataclass(frozen=True)
class Request:
    """A request head the forwarder accepted."""

    method: str  # the HTTP method
    target: str  # the request target (origin form)
    headers: tuple[tuple[str, str], ...]  # the headers to send on (hop-by-hop ones dropped)
    body_bytes: int  # Content-Length


class Refused(ValueError):
    """A request the forwarder does not pass; `status` is the HTTP status it answers with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def target_pattern(rollout_id: str) -> re.Pattern[str]:
    """The request targets allowed for `rollout_id`."""
    return re.compile(rf"/r/{re.escape(rollout_id)}/{SAFE_PATH}{SAFE_QUERY}")


def parse_head(head: bytes, allowed: re.Pattern[str]) -> Request:
    """Check one request head (pure); raises Refused."""
    try:
        lines = head.decode("ascii").split("\r\n")
    except UnicodeDecodeError as exc:
        raise Refused(400, "the request head is not ASCII") from exc
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
        raise Refused(400, f"malformed request line {lines[0][:200]!r}")
    method, target, _ = parts
    path = target.split("?", 1)[0]
    if not allowed.fullmatch(target) or any(segment in (".", "..") for segment in path.split("/")) or "//" in path:
        raise Refused(403, f"{target[:200]!r} is not this rollout's gateway path: only {allowed.pattern[:80]} passes")
    headers = []
    body_bytes = 0
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise Refused(400, f"malformed header line {line[:200]!r}")
        lower, value = name.lower(), value.strip()
        if lower == "transfer-encoding":
            raise Refused(411, "chunked request bodies are not forwarded: send Content-Length")
        if lower == "content-length":
            if not value.isdigit() or body_bytes:
                raise Refused(400, f"bad or repeated Content-Length {value!r}")
            body_bytes = int(value)
        if lower not in DROPPED_HEADERS:
            headers.append((name, value))
    return Request(method, target, tuple(headers), body_bytes)


def render_head(request: Request, host: str, port: int) -> bytes:
    """The head sent upstream: the same request, our Host, one request per connection."""
    lines = [f"{request.method} {request.target} HTTP/1.1", f"Host: {host}:{port}",
             *(f"{name}: {value}" for name, value in request.headers), "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


def refusal(status: int, message: str) -> bytes:
    """An OpenAI-shaped JSON error answer."""
    body = json.dumps({"error": {"message": f"sandbox forwarder: {message}", "type": "sandbox_forwarder",
                                 "code": status}}).encode()
    return (f"HTTP/1.1 {status} Refused\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n").encode() + body


class GatewayForwarder:
    """Listens on `socket_path`; passes requests for `/r/{rollout_id}/...` to the gateway at `host`:`port`."""

    def __init__(self, socket_path: Path, host: str, port: int, rollout_id: str, *, mode: int = 0o666) -> None:
        self.socket_path = socket_path
        self.upstream = (host, port)
        self.allowed = target_pattern(rollout_id)
        self.refused = 0  # requests refused so far
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        forwarder = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                if not forwarder._slots.acquire(blocking=False):
                    with contextlib.suppress(OSError):
                        self.request.sendall(refusal(503, f"more than {MAX_CONNECTIONS} connections at once"))
                    return
                try:
                    forwarder.handle(self.request)
                finally:
                    forwarder._slots.release()

        with contextlib.suppress(FileNotFoundError):
            socket_path.unlink()
        self._server = socketserver.ThreadingUnixStreamServer(str(socket_path), Handler)
        self._server.daemon_threads = True
        os.chmod(socket_path, mode)
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"forwarder-{rollout_id}",
                                        daemon=True)
        self._thread.start()

    def handle(self, client: socket.socket) -> None:
        """Serve one connection: one request, checked, forwarded, answered."""
        client.settimeout(CLIENT_TIMEOUT_S)
        try:
            head, rest = _read_head(client)
            request = parse_head(head, self.allowed)
        except Refused as refused:
            self.refused += 1
            with contextlib.suppress(OSError):
                client.sendall(refusal(refused.status, str(refused)))
                _linger(client)
            return
        except OSError:
            return
        try:
            upstream = socket.create_connection(self.upstream, timeout=UPSTREAM_TIMEOUT_S)
        except OSError as exc:
            with contextlib.suppress(OSError):
                client.sendall(refusal(502, f"the gateway at {self.upstream[0]}:{self.upstream[1]} is unreachable "
                                            f"({exc})"))
            return
        with contextlib.suppress(OSError), upstream:
            upstream.sendall(render_head(request, *self.upstream))
            _send_body(client, upstream, rest, request.body_bytes)
            while chunk := upstream.recv(65536):
                client.sendall(chunk)

    def close(self) -> None:
        """Stop listening and remove the socket."""
        self._server.shutdown()
        self._server.server_close()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    def __enter__(self) -> GatewayForwarder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _linger(client: socket.socket) -> None:
    """After a refusal: end our side, then read what the client still sends (its body) for a bounded while, so that
    closing with unread data does not reset the connection before the client has read the refusal."""
    client.shutdown(socket.SHUT_WR)
    deadline, drained = time.monotonic() + LINGER_S, 0
    while drained < LINGER_BYTES and (left_s := deadline - time.monotonic()) > 0:
        client.settimeout(left_s)
        if not (chunk := client.recv(65536)):
            return
        drained += len(chunk)


def _read_head(client: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD_BYTES:
            raise Refused(431, f"request head over {MAX_HEAD_BYTES} bytes")
        chunk = client.recv(65536)
        if not chunk:
            raise Refused(400, "connection closed before the request head ended")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _send_body(client: socket.socket, upstream: socket.socket, rest: bytes, body_bytes: int) -> None:
    """Send exactly `body_bytes` of body upstream; anything the client sends after it is never forwarded."""
    upstream.sendall(rest[:body_bytes])
    left = body_bytes - min(len(rest), body_bytes)
    while left > 0:
        chunk = client.recv(min(65536, left))
        if not chunk:
            break
        upstream.sendall(chunk)
        left -= len(chunk)
