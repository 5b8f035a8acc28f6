"""A request head or trailers without end do not grow the gateway: 431 and the connection closed, on a real socket to
the served gateway (gateway/http_protocol.py; its byte and time bounds are tested one by one in
unit/test_http_protocol.py)."""

from __future__ import annotations

import json
import select
import socket
from urllib.parse import urlparse

import httpx
import pytest

PIECE = b"x-pad: " + b"a" * 4000 + b"\r\n"


def _send_until_answered(port: int, opening: bytes, piece: bytes, limit_bytes: int = 4 << 20) -> bytes:
    """Send `opening`, then `piece` again and again until the gateway answers (or `limit_bytes` are out): its answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(opening)
        sent = len(opening)
        try:
            while sent < limit_bytes and not select.select([sock], [], [], 0)[0]:
                sock.sendall(piece)
                sent += len(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass  # sent over 1 MiB past the refusal before seeing it (a loaded machine): closed, the answer queued
        answer = b""
        try:
            while chunk := sock.recv(65536):  # the gateway ends its side after its answer: the read ends
                answer += chunk
        except ConnectionResetError:
            pass
        return answer


def _send_trailers_until_closed(port: int, limit_bytes: int = 64 << 20) -> int:
    """A chunked request whose trailers never end: the bytes sent before the gateway closed the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"POST /r/any/v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
                     b"5\r\nhello\r\n0\r\n")
        sent = 0
        try:
            while sent < limit_bytes:
                sock.sendall(PIECE)
                sent += len(PIECE)
        except (BrokenPipeError, ConnectionResetError):  # closed: no answer to read, the app had the request
            return sent
        return sent


def test_endless_trailers_close_the_connection_and_the_gateway_serves_on(gateway):
    sent = _send_trailers_until_closed(urlparse(gateway.url).port)
    assert sent < 64 << 20, "the gateway kept reading trailers"
    assert httpx.get(f"{gateway.url}/health", timeout=10).json() == {"status": "ok"}


@pytest.mark.parametrize(("opening", "piece"), [
    (b"POST /r/any/v1/chat/completions HTTP/1.1\r\nhost: x\r\n", PIECE),
    (b"GET /health HTTP/1.1\r\nhost: x\r\nx-pad: ", b"a" * 4000),
], ids=["many-headers", "one-endless-value"])
def test_an_endless_head_is_431_and_closed_and_the_gateway_serves_on(gateway, opening, piece):
    port = urlparse(gateway.url).port
    answer = _send_until_answered(port, opening, piece)
    head, body = answer.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 431 ") and b"connection: close" in head
    assert json.loads(body)["error"]["code"] == "request_head_too_large"
    assert httpx.get(f"{gateway.url}/health", timeout=10).json() == {"status": "ok"}
