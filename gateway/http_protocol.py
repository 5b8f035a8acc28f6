"""The gateway's HTTP/1.1 server protocol: uvicorn's httptools protocol with a bounded request head.

uvicorn keeps a request's line and headers in memory until the head ends, with no limit on their size or on how long
they take (measured: one connection sending 200 MB of headers grew the gateway by 200 MB), and a connection that
sends nothing is kept forever. Harnesses are the policy's programs and reach the gateway directly on Kubernetes, so
`GatewayHttpProtocol` bounds what one connection can hold before its request reaches the app:

- a head (request line and headers) over `MAX_HEAD_BYTES` is answered 431 and the connection closed;
- a head not complete `HEAD_TIMEOUT_S` after its first chunk is answered 408 and the connection closed;
- a new connection that sends nothing is closed after the keep-alive timeout, as an idle one is between requests.

Bodies were bounded already (uvicorn stops reading past 64 KiB unread, the gateway refuses bodies over its
`max_body_bytes`).
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.errors import error_body

MAX_HEAD_BYTES = 64 * 1024
"""The largest request head (request line and headers) served; the harness SDKs and CLIs send a few KiB."""

HEAD_TIMEOUT_S = 30.0
"""How long a request's head may take from its first chunk."""

LINGER_S = 1.0
"""How long a refused connection's further bytes are read and dropped before it is closed."""

LINGER_BYTES = 1 << 20
"""How many further bytes a refused connection may send before it is closed at once."""

_REASONS = {431: b"Request Header Fields Too Large", 408: b"Request Timeout"}


class GatewayHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol whose request heads are bounded in bytes and in time."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._in_head, self._head_bytes, self._began = True, 0, False
        self._in_body, self._frame_bytes, self._body_bytes, self._head_ended = False, 0, 0, False
        self._head_timer: asyncio.TimerHandle | None = None
        self._dropping: int | None = None  # refused: the bytes dropped since (None: serving)
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def data_received(self, data: bytes) -> None:
        if self._dropping is not None:
            self._dropping += len(data)
            if self._dropping > LINGER_BYTES:
                self.transport.close()
            return
        self._began = self._head_ended = False
        self._body_bytes = 0
        super().data_received(data)
        if self._in_head and not self.transport.is_closing():  # rare: a head split over several chunks
            self._head_continues(len(data))
        elif self._in_body and not (self._began or self._head_ended) and len(data) > self._body_bytes:
            self._frame_continues(len(data) - self._body_bytes)

    def _frame_continues(self, size: int) -> None:
        """A chunk inside a request's body held `size` bytes that are not body: chunk size lines and trailers, which
        the parser keeps as headers. The app has the request already: past the bound the connection is closed."""
        self._frame_bytes += size
        if self._frame_bytes > MAX_HEAD_BYTES:
            self.logger.warning("closed a connection whose request sent over %d bytes of chunk framing and trailers",
                                MAX_HEAD_BYTES)
            self.transport.close()

    def _head_continues(self, size: int) -> None:
        """A chunk ended inside a head. A chunk in which a message began is not counted (the bytes before that
        message's first byte are not its head, and the parser's position is not exposed): a head may hold one chunk
        more than the limit. The head's clock starts here, not per request: most heads arrive in one chunk."""
        self._head_bytes = 0 if self._began else self._head_bytes + size
        if self._head_bytes > MAX_HEAD_BYTES:
            self._refuse(431, f"the request's head (request line and headers) is over {MAX_HEAD_BYTES} bytes; "
                              "send large data in the body", "request_head_too_large")
        elif self._head_timer is None:
            self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timed_out)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_bytes, self._began = True, 0, True

    def on_headers_complete(self) -> None:
        self._in_head, self._in_body, self._head_ended, self._frame_bytes = False, True, True, 0
        if self._head_timer is not None:
            self._cancel_head_timer()
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._in_body = False
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._in_head and not self.transport.is_closing():
            self._refuse(408, f"the request's head did not arrive within {HEAD_TIMEOUT_S:g} s", "request_head_timeout")

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _refuse(self, status: int, message: str, code: str) -> None:
        """Answer `status` with the gateway's JSON error, end our side, drop what still comes, then close: nothing of
        the request reaches the app."""
        self._cancel_head_timer()
        body = error_body(message, "invalid_request_error", code=code)
        head = (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
                % (status, _REASONS[status], len(body)))
        self.transport.write(head + body)
        self._dropping = 0
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)
