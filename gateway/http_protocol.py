"""The gateway's HTTP/1.1 server protocol: uvicorn's httptools protocol, with what one connection may hold bounded.

uvicorn keeps a request's line and headers in memory until the head ends, with no limit on their size, their count
or how long they take, queues every pipelined request a chunk holds, keeps trailers, and holds a connection that
trickles bytes forever (measured: one connection sending 200 MB of headers grew the gateway by 200 MB; one
pipelining small requests, by 2.5 GB in 12 s). Harnesses are the policy's programs and reach the gateway directly on
Kubernetes, so `GatewayHttpProtocol` bounds each connection before its requests reach the app:

- a head (request line and headers, and any blank lines before it) over `MAX_HEAD_BYTES` or `MAX_HEADERS` headers is
  answered 431; one not complete `HEAD_TIMEOUT_S` after its first chunk 408;
- trailers or chunk framing past `MAX_HEAD_BYTES` (trailers are not kept: the app never reads them) and more than
  `MAX_PIPELINED` requests queued behind the one being answered close the connection (the apps of its requests see a
  disconnect), as does the unread rest of an answered request's body not arrived within `DRAIN_TIMEOUT_S` (parsed
  and dropped meanwhile, so that the connection can carry the next request); a body the app is still reading must
  keep up `BODY_MIN_RATE_BPS` after `BODY_GRACE_S` (a body trickled forever held its rollout's share of the request
  bytes in flight, `request_bytes.py`; a 32 MiB upload at 8 KiB/s passes); a body in many
  small chunks yields to the other connections every `CHUNKS_PER_TURN` chunks (each costs Python callbacks: one
  connection sending 1-byte chunks held every other one up for about 3 s);
- a refusal ends the gateway's side and drops what still comes (at most `LINGER_S`, `LINGER_BYTES`) before closing,
  since closing with unread bytes resets the connection and a client still sending would lose the answer that
  names the fix; while another answer is on its way the connection is closed instead;
- a new connection that sends nothing is closed after the keep-alive timeout, as an idle one is between requests, and
  a connection lost to a reset lets go of its state at once (uvicorn kept it until its keep-alive timer fired);
- an answer the client does not read: a connection whose transport stays paused for writing (its buffer past the
  high-water mark, not drained to the low-water mark since) for `WRITE_STALL_S` is aborted, its buffer dropped
  (uvicorn waited forever: 16 connections asking for a 32 MB artifact and reading nothing held 520 MB, past the
  keep-alive timeout too, since a close waits for the buffer to drain); an idle connection whose client has not read
  all of its last answer is aborted at the keep-alive timeout, not closed (the kernel kept such an answer queued for
  minutes after a close); each connection's kernel send buffer is `SEND_BUFFER_BYTES` (autotuned, it held up to 4 MB
  for a client that read nothing); the app drops a connection through the scope extension `ABORT_EXTENSION`
  (`answer_pace.py`: a client too slow to read its answers);
- a new connection past the server's `ConnectionLimits` (`connection_limits.py`: per client address, and in all) is
  refused before it is read: 429 `too_many_connections` (lingering as above) or 503 `gateway_at_connection_limit`
  (closed at once).

Bodies were bounded already: uvicorn stops reading past 64 KiB unread, the gateway refuses bodies over
`max_body_bytes`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from gateway.connection_limits import SERVED, Admission, ConnectionLimits, client_address
from gateway.drained_close import DrainingTransport, reset_on_close, unsent_bytes
from gateway.errors import error_body

MAX_HEAD_BYTES = 64 * 1024
"""The largest request head served (request line and headers); the harness SDKs and CLIs send a few KiB."""
MAX_HEADERS = 256
"""The most headers a request head (or its trailers) may carry; the SDKs send about 20."""
HEADER_COST_BYTES = 64
"""What each header or trailer costs against `MAX_HEAD_BYTES` beside its bytes (what keeping it costs in memory)."""
MAX_PIPELINED = 8
"""The most requests queued behind the one being answered (no harness client pipelines)."""
HEAD_TIMEOUT_S = 30.0
"""How long a request's head may take from its first chunk."""
DRAIN_TIMEOUT_S = 30.0
"""How long the rest of a request's body may take once the gateway has answered the request."""
LINGER_S = 1.0
"""How long a refused connection's further bytes are read and dropped before it is closed."""
LINGER_BYTES = 1 << 20
"""How many further bytes a refused connection may send before it is closed at once."""
CHUNKS_PER_TURN = 1024
"""Chunks of a chunked body parsed from one read before the connection lets the others have a turn (a body of
1-byte chunks costs a few Python callbacks a chunk)."""
FRAME_BYTES_PER_CHUNK = 32
"""The chunk framing (size line and line ends) a chunked body may spend per chunk, beyond `MAX_HEAD_BYTES`."""
BODY_GRACE_S = 30.0
"""How long a request's body may take before it must keep up `BODY_MIN_RATE_BPS` (on average since its head)."""
BODY_MIN_RATE_BPS = 8 * 1024
"""The slowest a body may arrive after `BODY_GRACE_S`: each of its bytes extends its deadline by 1 / this."""
WRITE_STALL_S = 60.0
"""How long an answer may wait on a client that does not read it (the transport paused for writing throughout)."""
SEND_BUFFER_BYTES = 256 * 1024
"""The kernel's send buffer of each connection (the kernel doubles it; autotuned, it grew to 4 MB): what a client
that reads nothing leaves queued outside the process, and how far an answer is ahead of what the client has read."""
ABORT_EXTENSION = "harnessrl.abort_connection"
"""The scope extension through which the app drops the connection it answers on (`answer_pace.py`: a client too slow
to read): a callable taking the reason, for the warning."""
REFUSAL_LOG_EVERY_S = 10.0
"""At most one warning this often about connections refused for the limits or aborted for a stall."""

IDLE, HEAD, BODY = 0, 1, 2  # between requests, inside a request's head, inside its body
CLOSE = (0, "", "")  # a refusal answered by closing the connection alone


class _Refused(Exception):
    """Raised in a parser callback to stop parsing at once; `send_400_response` then refuses."""


class GatewayHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol whose requests' heads, bodies, trailers and pipelining are bounded, and whose new
    connections are counted against `limits` (shared by the server's connections; None: not limited)."""

    _last_refusal_log = float("-inf")  # when a refusal or a stall was last logged (loop time, every protocol)

    def __init__(self, *args, limits: ConnectionLimits | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._limits = limits

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(DrainingTransport(transport, self.loop, self._warn_reset))  # type: ignore[arg-type]
        self._state, self._head_bytes, self._head_headers = IDLE, 0, 0
        self._frame_bytes, self._chunks, self._body_bytes, self._completed, self._head_ended = 0, 0, 0, False, False
        self._read_size, self._read_chunks = 0, 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        self._rate_timer: asyncio.TimerHandle | None = None
        self._request_body_bytes, self._body_started, self._requests = 0, 0.0, 0
        self._refusal: tuple[int, str, str] | None = None
        self._answering = None  # the cycle whose app runs (uvicorn keeps only the newest in `cycle`)
        self._dropping: int | None = None  # refused: the bytes dropped since (None: serving)
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)
        _set_send_buffer(transport)
        self._client = client_address(transport.get_extra_info("peername"))
        self._admission = Admission.EXEMPT if self._limits is None else self._limits.admit(self._client)
        if self._admission not in SERVED:
            self._refuse_connection()

    def data_received(self, data: bytes) -> None:
        if self._dropping is not None:
            self._dropping += len(data)
            if self._dropping > LINGER_BYTES:
                self.transport.close()
            return
        self._completed, self._head_ended, self._body_bytes = False, False, 0
        self._read_size, self._read_chunks = len(data), 0
        super().data_received(data)
        if self.transport.is_closing() or self._dropping is not None:
            return
        if self._read_chunks > CHUNKS_PER_TURN and not self.flow.read_paused:
            self._yield_turn()
        if self._state == HEAD or (self._state == IDLE and not self._completed):  # a head spans chunks (rare)
            self._head_continues(len(data))
        elif self._state == BODY:  # a body spans chunks (the chunk where the head ended holds head bytes: not counted)
            self._body_continues(0 if self._head_ended else len(data) - self._body_bytes)

    def _head_continues(self, size: int) -> None:
        """The chunk ended inside a head (or held only what comes between requests). The whole chunk counts: it can
        hold the end of a pipelined request before this head, a bounded over-count."""
        self._head_bytes += size
        headers = len(self.headers)  # uvicorn's list, begun with the message
        if headers > MAX_HEADERS or self._head_bytes + HEADER_COST_BYTES * headers > MAX_HEAD_BYTES:
            self._refuse(_too_large())
        elif self._head_timer is None:
            self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timed_out)

    def _body_continues(self, frame_bytes: int) -> None:
        """The chunk ended inside a body; `frame_bytes` of it were not body (chunk framing, trailers)."""
        if self._rate_timer is None:  # a body over several reads: from now on it must keep up the minimum rate
            self._rate_timer = self.loop.call_at(self._body_started + BODY_GRACE_S, self._check_body_rate,
                                                 self._requests)
        self._frame_bytes += max(frame_bytes, 0)
        trailers = len(self.headers) - self._head_headers  # uvicorn adds trailers to the head's list
        if (trailers > MAX_HEADERS or self._frame_bytes + HEADER_COST_BYTES * trailers
                > MAX_HEAD_BYTES + FRAME_BYTES_PER_CHUNK * self._chunks):
            self.logger.warning("closed a connection whose request sent over %d bytes of chunk framing and trailers",
                                MAX_HEAD_BYTES)
            self._close_now()

    # -- the parser's callbacks ----------------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._state = HEAD

    def on_headers_complete(self) -> None:
        if len(self.headers) > MAX_HEADERS or (self._head_bytes + self._read_size > MAX_HEAD_BYTES
                                               and self._head_size() > MAX_HEAD_BYTES):
            self._stop(_too_large())  # a head in one read (a head over several is counted as it comes)
        if self.cycle is not None and not self.cycle.response_complete and len(self.pipeline) >= MAX_PIPELINED:
            self._stop(CLOSE)
        self._state, self._head_bytes, self._frame_bytes, self._chunks = BODY, 0, 0, 0
        self._head_ended, self._head_headers = True, len(self.headers)
        self._request_body_bytes, self._body_started, self._requests = 0, self.loop.time(), self._requests + 1
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().on_headers_complete()

    def on_chunk_header(self) -> None:
        self._chunks += 1
        self._read_chunks += 1

    def _head_size(self) -> int:
        return len(self.url) + sum(len(name) + len(value) + HEADER_COST_BYTES for name, value in self.headers)

    def _yield_turn(self) -> None:
        """Stop reading until the loop's next turn, so that one connection's small chunks do not starve the others."""
        self.flow.pause_reading()
        self.loop.call_soon(self._end_turn)

    def _end_turn(self) -> None:
        # while the app has 64 KiB unread, uvicorn's own pause holds
        if not self.transport.is_closing() and (self.cycle is None or len(self.cycle.body) <= HIGH_WATER_LIMIT):
            self.flow.resume_reading()

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        self._request_body_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._state, self._completed = IDLE, True
        del self.headers[self._head_headers:]  # trailers: never kept (uvicorn adds them to the headers the app holds)
        for timer in (self._body_timer, self._rate_timer):
            if timer is not None:
                timer.cancel()
        self._body_timer = self._rate_timer = None
        super().on_message_complete()

    def _check_body_rate(self, request: int) -> None:
        """The body of request number `request` is still arriving: close unless it has kept up the minimum rate."""
        self._rate_timer = None
        if request != self._requests or self._state != BODY or self.transport.is_closing():
            return
        allowed = self._body_started + BODY_GRACE_S + self._request_body_bytes / BODY_MIN_RATE_BPS
        if self.loop.time() < allowed:
            self._rate_timer = self.loop.call_at(allowed, self._check_body_rate, request)
            return
        self._warn_now_and_then(f"closed a connection whose request body arrived slower than {BODY_MIN_RATE_BPS} "
                                f"bytes/s after {BODY_GRACE_S:g} s")
        self._close_now()

    # -- refusals and the end of a connection --------------------------------------------------------------------

    def _stop(self, refusal: tuple[int, str, str]) -> None:
        """Refuse from inside the parser: raising stops it; uvicorn reports the parser error to `send_400_response`."""
        self._refusal = refusal
        raise _Refused

    def send_400_response(self, msg: str) -> None:
        answering = self._answering is not None and not self._answering.response_complete
        if self._refusal is None and not answering:
            super().send_400_response(msg)
        else:  # ours, or uvicorn's own 400 while another answer is on its way: that answer would be cut by it
            self._refuse(self._refusal or CLOSE)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._state == BODY or self.transport.is_closing() or self._dropping is not None:
            return
        if self._state == IDLE and self.cycle is not None and not self.cycle.response_complete:
            # stray bytes after a request whose answer is still on its way (a long call): no head began; wait on
            self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timed_out)
            return
        self._refuse((408, f"the request's head did not arrive within {HEAD_TIMEOUT_S:g} s", "request_head_timeout"))

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._state == BODY and self._body_timer is None and not self.transport.is_closing():
            self._body_timer = self.loop.call_later(DRAIN_TIMEOUT_S, self._body_timed_out)  # answered, body unread

    def _body_timed_out(self) -> None:
        self._body_timer = None
        if self._state == BODY and not self.transport.is_closing():
            self.logger.warning("closed a connection whose answered request's body did not end within %g s",
                                DRAIN_TIMEOUT_S)
            self._close_now()

    def _refuse_connection(self) -> None:
        """A new connection past the limits: 429 for its address (lingering while few of its refusals do), 503 for
        the process (closed at once: lingering would hold the descriptors the limit keeps)."""
        limits = self._limits
        assert limits is not None
        if self._admission is Admission.TOTAL_REFUSED:
            refusal = (503, f"the gateway holds {limits.total} connections, the most it may (gateway setting "
                            "max_connections, default from the process's file-descriptor limit); retry later",
                       "gateway_at_connection_limit")
        else:
            refusal = (429, f"this client address ({self._client}) holds {limits.per_client} connections to the "
                            "gateway, the most one address may (gateway setting max_connections_per_client); reuse "
                            "connections (keep-alive) and close idle ones", "too_many_connections")
        self._warn_now_and_then(f"refused connections: {refusal[1]}")
        self._refuse(refusal, linger=self._admission is Admission.CLIENT_REFUSED)

    def _warn_now_and_then(self, message: str) -> None:
        """Log `message` unless a warning of this kind was logged in the last `REFUSAL_LOG_EVERY_S` (a flood of
        refusals or stalls is one line every so often, whatever its rate)."""
        now = self.loop.time()
        if now - GatewayHttpProtocol._last_refusal_log >= REFUSAL_LOG_EVERY_S:
            GatewayHttpProtocol._last_refusal_log = now
            self.logger.warning("%s (at most one such warning every %g s)", message, REFUSAL_LOG_EVERY_S)

    def _refuse(self, refusal: tuple[int, str, str], *, linger: bool = True) -> None:
        """Answer the refusal's status with the gateway's JSON error, end our side, drop what still comes, then close
        (without `linger`: close once the answer is written); for `CLOSE`, or while another answer is on its way
        (pipelining), only close. The request never reaches the app."""
        self._cancel_timers()
        status, message, code = refusal
        answering = any(cycle is not None and not cycle.response_complete for cycle in (self._answering, self.cycle))
        if status == 0 or answering:
            self._close_now()
            return
        if self._state == HEAD:
            del self.headers[:]  # the refused head's headers: no app holds them
        body = error_body(message, "invalid_request_error", code=code)
        fields = b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body)
        head = STATUS_LINE[status] + fields
        self.transport.write(head + body)
        self._dropping = 0
        if not linger:
            self.transport.close()
            return
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)

    def _should_upgrade_to_ws(self) -> bool:
        """Never: the gateway serves no WebSocket (uvicorn's hand-over to a WebSocket protocol skipped this one's
        `connection_lost`, so an upgrade request kept its place in the connection limits for good)."""
        return False

    def _unsupported_upgrade_warning(self) -> None:
        """An `Upgrade` request is served as a plain one (its route answers it); nothing to warn about each time."""

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(WRITE_STALL_S, self._write_stalled)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._cancel_write_timer()

    def eof_received(self) -> bool:
        """The client half-closed: close through the transport's drained close (returning None let the transport
        close itself, past every deadline: half-closed clients left orphans, held connections for good and kept
        `serve` from stopping)."""
        self.transport.close()
        return True

    def shutdown(self) -> None:
        """The server stops: a connection whose answer its client has not read is reset at once, not drained."""
        if (self.cycle is None or self.cycle.response_complete) and unsent_bytes(self.transport):
            reset_on_close(self.transport)
            self.transport.abort()
            return
        super().shutdown()

    def timeout_keep_alive_handler(self) -> None:
        """An idle connection is closed; one whose client has not read all of its last answer yet is aborted, so the
        kernel does not keep that answer queued for minutes after the close (a FIN-WAIT-1 orphan, outside every
        limit)."""
        if not self.transport.is_closing() and unsent_bytes(self.transport):
            self._abort_for("left its last answer unread past the keep-alive timeout")
            return
        super().timeout_keep_alive_handler()

    def _write_stalled(self) -> None:
        """The client read too little of an answer for `WRITE_STALL_S`."""
        self._write_timer = None
        self._abort_for(f"read too little of its answers for {WRITE_STALL_S:g} s")

    def _warn_reset(self, why: str) -> None:
        self._warn_now_and_then(f"reset a connection whose client {why}")

    def _abort_for(self, why: str) -> None:
        """Drop the connection and what it buffers (a close would wait for the buffer to drain; the requests under
        it see a disconnect)."""
        self._warn_now_and_then(f"aborted a connection whose client {why}")
        self._disconnect_requests()
        reset_on_close(self.transport)
        self.transport.abort()

    def _start_asgi_task(self, cycle, app) -> None:
        cycle.scope.setdefault("extensions", {})[ABORT_EXTENSION] = self._abort_for
        self._answering = cycle
        super()._start_asgi_task(cycle, app)

    def _close_now(self) -> None:
        """Close the connection under its requests: their apps see a disconnect, their answers go nowhere (uvicorn
        would write them to the closed transport, an error in the app's `send`)."""
        self._disconnect_requests()
        self.transport.close()

    def _disconnect_requests(self) -> None:
        """Every request of the connection not yet answered sees a disconnect (uvicorn marks only the newest)."""
        for cycle in (self._answering, self.cycle, *(queued for queued, _ in self.pipeline)):
            if cycle is not None and not cycle.response_complete:
                cycle.disconnected = True
                cycle.message_event.set()

    def _cancel_timers(self) -> None:
        for timer in (self._head_timer, self._body_timer, self._rate_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = self._rate_timer = None

    def _cancel_write_timer(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._limits is not None:
            self._limits.release(self._client, self._admission)
        self._cancel_timers()
        self._cancel_write_timer()
        self._disconnect_requests()
        super().connection_lost(exc)
        self._unset_keepalive_if_required()  # uvicorn cancels it only on a clean close: a reset kept all for 75 s
        self.headers, self.pipeline, self._answering = [], type(self.pipeline)(), None


def _set_send_buffer(transport: asyncio.Transport) -> None:
    sock = transport.get_extra_info("socket")
    with contextlib.suppress(AttributeError, OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)


def _too_large() -> tuple[int, str, str]:
    return (431, f"the request's head (request line and headers) is over {MAX_HEAD_BYTES} bytes or {MAX_HEADERS} "
                 "headers; send large data in the body", "request_head_too_large")
