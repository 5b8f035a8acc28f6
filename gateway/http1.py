"""A lean HTTP/1.1 client for the gateway's unary calls to an engine over plain http.

Each call is one POST written in one `write` and one answer read whole, parsed by httptools (llhttp, the parser
uvicorn serves the harnesses with) on a keep-alive connection taken from a pool per host and port. It does what a
unary engine call needs and nothing else (no redirects, cookies, proxies, TLS or compression negotiation: it sends
no Accept-Encoding, and a gzip or deflate answer sent anyway is decoded), at about a quarter of aiohttp's cost a
request. Streams and https engines stay on aiohttp (`gateway.upstream`).

Errors: the connection could not be made, or broke before the answer's head arrived, is `UpstreamConnectionError`
(a `ConnectionError`); a head that is not HTTP, or a body cut short or broken, is `UpstreamPayloadError`; an answer
not whole within the pool's `answer_timeout_s` of its request's write is a `TimeoutError` (one timer for the pool:
every call shares the timeout, so the calls in flight are in the order of their deadlines); a cancelled call closes
its connection. Interim (1xx) answers are skipped; bytes after an answer close its connection.
"""

from __future__ import annotations

import asyncio
import base64
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import SplitResult, unquote, urlsplit

import httptools

IDLE_KEEPALIVE_S = 4.0
"""A pooled connection idle for longer than this is closed rather than reused: below the 5 s keep-alive of uvicorn,
which serves vLLM and the embedded engine, so that the engine never closes a connection as a call goes out on it."""


class UpstreamConnectionError(ConnectionError):
    """The engine could not be reached, or closed the connection before its answer's head."""


class UpstreamPayloadError(Exception):
    """The engine's answer broke HTTP: a head that does not parse, or a body cut short or malformed."""


@dataclass
class Answer:
    """One whole answer."""

    status: int  # the HTTP status
    headers: dict[str, str] = field(default_factory=dict)  # lower-cased names (the last of repeated ones)
    body: bytes = b""  # the body, decoded when it was gzip or deflate
    keep_alive: bool = False  # the connection may carry another request


class _Connection(asyncio.Protocol):
    """One keep-alive connection; one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = time.monotonic()
        self._parser: httptools.HttpResponseParser | None = None
        self._answer: Answer | None = None
        self._chunks: list[bytes] = []
        self._head_done = False
        self._waiter: asyncio.Future | None = None
        self._charge: Callable[[int], None] | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def request(self, head: bytes, body: bytes, charge: Callable[[int], None] | None = None) -> asyncio.Future:
        """Write the request; the future holds its `Answer`. `charge` is told each piece of the answer's body as it
        arrives; whatever it raises ends the read (and the connection) with that error."""
        self._waiter, self._charge = asyncio.get_running_loop().create_future(), charge
        self._parser, self._answer, self._chunks, self._head_done = httptools.HttpResponseParser(self), None, [], False
        self.transport.write(head + body)
        return self._waiter

    # -- the parser's callbacks ----------------------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_message_begin(self) -> None:
        if self._waiter is not None and self._waiter.done():  # bytes after the answer: the connection is not ours
            self.closed = True
            self.transport.close()
        self._headers: dict[str, str] = {}

    def on_headers_complete(self) -> None:
        self._head_done = True
        self._answer = Answer(self._parser.get_status_code(), self._headers)

    def on_body(self, body: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            return
        if self._charge is not None:
            try:
                self._charge(len(body))
            except Exception as exc:  # the caller's refusal: read no further
                self._finish(None, exc)
                self.close()
                return
        self._chunks.append(body)

    def on_message_complete(self) -> None:
        answer = self._answer
        if 100 <= answer.status < 200:  # an interim answer (RFC 9110 15.2): the final one follows on the same parser
            self._head_done, self._answer, self._chunks = False, None, []
            return
        answer.keep_alive = self._parser.should_keep_alive()
        self._finish(answer, None)

    # -- the transport's -----------------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            self.transport.close()  # bytes nobody asked for: this connection cannot be trusted again
            return
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:  # an upgrade (101) is not an answer
            self._finish(None, UpstreamPayloadError(f"the engine's answer is not valid HTTP/1.1: {exc}"))
            self.transport.close()

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is None or self._waiter.done():
            return
        if not self._head_done:
            self._finish(None, UpstreamConnectionError(f"the engine closed the connection before its answer "
                                                       f"({exc or 'end of stream'})"))
        elif self._delimited_by_close():
            self._answer.keep_alive = False
            self._finish(self._answer, None)
        else:
            self._finish(None, UpstreamPayloadError("the engine closed the connection before the end of its answer's "
                                                    "body (Content-Length or chunks not complete)"))

    def _delimited_by_close(self) -> bool:
        headers = self._answer.headers
        return "content-length" not in headers and "chunked" not in headers.get("transfer-encoding", "").lower()

    def _finish(self, answer: Answer | None, error: Exception | None) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if error is not None:
            waiter.set_exception(error)
            return
        try:
            answer.body = _decoded(b"".join(self._chunks), answer.headers.get("content-encoding", ""))
        except zlib.error as exc:
            waiter.set_exception(UpstreamPayloadError(f"the engine's compressed answer does not decode: {exc}"))
            return
        waiter.set_result(answer)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def time_out(self, timeout_s: float) -> None:
        """The answer took longer than `timeout_s`: the call fails with a TimeoutError, the connection is closed."""
        self._finish(None, TimeoutError(f"the engine's answer was not whole within {timeout_s} s"))
        self.close()


def _decoded(body: bytes, encoding: str) -> bytes:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding in ("gzip", "x-gzip", "deflate"):
        try:
            return zlib.decompress(body, 47)  # gzip or zlib, by their headers
        except zlib.error:
            if encoding != "deflate":
                raise
            return zlib.decompress(body, -15)  # raw deflate, as some servers send it
    raise zlib.error(f"content-encoding {encoding!r} is not one this client decodes (gzip, deflate)")


def _host_header(parts: SplitResult) -> str:
    """The Host header: the URL's host (an IPv6 address in brackets) and its port when it names one, never its
    user and password."""
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return host if parts.port is None else f"{host}:{parts.port}"


def _authorization(parts: SplitResult) -> str:
    """A Basic Authorization header line for a URL's user and password (`http://user:secret@host/`), as aiohttp
    sends them; none otherwise."""
    if parts.username is None:
        return ""
    credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    return f"Authorization: Basic {base64.b64encode(credentials).decode()}\r\n"


@dataclass(frozen=True)
class _Target:
    """What a URL decides of a request: where it goes and its head up to the Content-Length."""

    host: str
    port: int
    head_start: str  # the request line and the head's lines but the Content-Length and the blank line


MAX_TARGETS = 1024
"""URLs whose `_Target` a pool remembers (the registered engines' paths); past it, it forgets them all."""


def _target(url: str, content_type: str) -> _Target:
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"{url!r} is not an http:// URL with a host")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return _Target(parts.hostname, parts.port or 80, f"POST {path} HTTP/1.1\r\nHost: {_host_header(parts)}\r\n"
                   f"{_authorization(parts)}Content-Type: {content_type}\r\n")


class Http1Pool:
    """Keep-alive connections per (host, port); `post` takes an idle one or opens one. An answer not whole within
    `answer_timeout_s` of its request's write fails with a TimeoutError (None: the caller bounds the call)."""

    def __init__(self, connect_timeout_s: float = 10.0, answer_timeout_s: float | None = None) -> None:
        self._connect_timeout_s = connect_timeout_s
        self._answer_timeout_s = answer_timeout_s
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._targets: dict[tuple[str, str], _Target] = {}
        self._deadlines: dict[_Connection, float] = {}
        """The calls in flight and when each times out: in the order they were written, which is their deadlines'."""
        self._timer: asyncio.TimerHandle | None = None

    async def post(self, url: str, body: bytes, content_type: str = "application/json",
                   charge: Callable[[int], None] | None = None) -> Answer:
        """POST `body` to an http:// `url` and read the whole answer (`charge`: as `_Connection.request`)."""
        target = self._targets.get((url, content_type))
        if target is None:
            if len(self._targets) >= MAX_TARGETS:
                self._targets.clear()
            target = self._targets[(url, content_type)] = _target(url, content_type)
        head = f"{target.head_start}Content-Length: {len(body)}\r\n\r\n".encode("latin-1")
        connection = self._take(target.host, target.port) or await self._connect(target.host, target.port)
        try:
            if self._answer_timeout_s is not None:
                self._watch(connection)
            answer = await connection.request(head, body, charge)
        except BaseException:
            connection.close()  # an error or a cancelled call: whatever is left on the wire is not ours
            raise
        finally:
            self._deadlines.pop(connection, None)
        if answer.keep_alive and not connection.closed:
            connection.idle_since = time.monotonic()
            self._idle.setdefault((target.host, target.port), []).append(connection)
        else:
            connection.close()
        return answer

    def _watch(self, connection: _Connection) -> None:
        self._deadlines[connection] = time.monotonic() + self._answer_timeout_s
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._answer_timeout_s, self._expire)

    def _expire(self) -> None:
        """Time out the calls past their deadline (the first ones in flight), then wait for the next deadline."""
        self._timer, now = None, time.monotonic()
        while self._deadlines:
            connection, deadline = next(iter(self._deadlines.items()))
            if deadline > now:
                self._timer = asyncio.get_running_loop().call_later(deadline - now, self._expire)
                return
            del self._deadlines[connection]
            connection.time_out(self._answer_timeout_s)

    def _take(self, host: str, port: int) -> _Connection | None:
        idle, now = self._idle.get((host, port)), time.monotonic()
        while idle:
            connection = idle.pop()
            if not connection.closed and now - connection.idle_since < IDLE_KEEPALIVE_S:
                return connection
            connection.close()
        return None

    async def _connect(self, host: str, port: int) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                _, connection = await loop.create_connection(_Connection, host, port)
        except TimeoutError:
            raise UpstreamConnectionError(f"no connection to {host}:{port} within {self._connect_timeout_s} s") \
                from None
        except OSError as exc:
            raise UpstreamConnectionError(f"cannot connect to {host}:{port}: {exc}") from exc
        return connection

    def close(self) -> None:
        """Close every idle connection and stop timing the calls in flight."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()
