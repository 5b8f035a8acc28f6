"""Minimal raw-ASGI helpers: read a bounded body, declare a JSON body as JSON, send a JSON answer."""

from __future__ import annotations

from typing import Any

import orjson

from gateway import strict_json
from gateway.errors import BadRequest, GatewayError, PayloadTooLarge


def header(scope: dict, name: bytes) -> str | None:
    """A request header (lower-case name) as text."""
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


async def read_body(scope: dict, receive, limit_bytes: int) -> bytes:
    """The whole request body; PayloadTooLarge beyond `limit_bytes` (checked on Content-Length first)."""
    declared = header(scope, b"content-length")
    if declared is not None:
        if not declared.isdigit():
            raise BadRequest(f"invalid Content-Length {declared!r}")
        if int(declared) > limit_bytes:
            raise PayloadTooLarge(f"request body of {declared} bytes exceeds the limit of {limit_bytes} bytes "
                                  "(max_body_bytes)")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise BadRequest("client disconnected before sending the body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit_bytes:
            raise PayloadTooLarge(f"request body exceeds the limit of {limit_bytes} bytes (max_body_bytes)")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


PIECE_BYTES = 256 * 1024
"""A body larger than this is sent in pieces of this size: the server waits for the client to read before taking the
next one, so a client that reads nothing holds only about one piece in the connection's buffer."""


async def send_bytes(send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None,
                     content_type: bytes = b"application/json") -> None:
    """A complete response (a large body in pieces of `PIECE_BYTES`)."""
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send_last_body(send, body)


async def send_last_body(send, body: bytes) -> None:
    """The last of a response's body (a large one in pieces of `PIECE_BYTES`, each once the client has read the one
    before)."""
    if len(body) <= PIECE_BYTES:
        await send({"type": "http.response.body", "body": body})
        return
    view = memoryview(body)
    for start in range(0, len(body), PIECE_BYTES):
        end = start + PIECE_BYTES
        await send({"type": "http.response.body", "body": view[start:end], "more_body": end < len(body)})


async def send_error(send, error: GatewayError) -> None:
    """An OpenAI-style error response."""
    headers = [(name.encode(), value.encode()) for name, value in error.headers().items()]
    await send_bytes(send, error.status, error.body(), headers)


def declares_json(scope: dict) -> bool:
    """Whether the request's Content-Type is JSON (application/json or a +json type)."""
    media_type = (header(scope, b"content-type") or "").split(";")[0].strip().lower()
    return media_type == "application/json" or media_type.endswith("+json")


def as_json_request(scope: dict, body: bytes) -> dict:
    """`scope` declaring application/json when its body is a JSON object or array sent under another Content-Type.

    `curl -d` sends `application/x-www-form-urlencoded`; the admin API reads JSON only, so a JSON body is accepted
    whatever its declared type. Anything else is left as it came and meets the same validation errors as before.
    """
    if declares_json(scope) or body.lstrip()[:1] not in (b"{", b"["):
        return scope
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        return scope
    headers = [(key, value) for key, value in scope["headers"] if key != b"content-type"]
    return {**scope, "headers": [*headers, (b"content-type", b"application/json")]}


def json_object(raw: bytes) -> dict[str, Any]:
    """A request body that must be one JSON object, every value in it one the store keeps exactly
    (`strict_json.loads`); BadRequest naming what it is otherwise."""
    body = strict_json.loads(raw)
    if not isinstance(body, dict):
        raise BadRequest(f"request body must be a JSON object, not {type(body).__name__}")
    return body
