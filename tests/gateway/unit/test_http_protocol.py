"""The gateway's HTTP protocol bounds a request's head in bytes and in time (gateway/http_protocol.py), driven on a
recording transport: no socket, no server process."""

from __future__ import annotations

import asyncio
import json
import socket
import struct

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from gateway import http_protocol
from gateway.connection_limits import ConnectionLimits
from gateway.http_protocol import CHUNKS_PER_TURN, MAX_HEAD_BYTES, MAX_HEADERS, MAX_PIPELINED, GatewayHttpProtocol


class RecordingTransport(asyncio.Transport):
    """What the protocol wrote, and whether it closed the connection."""

    def __init__(self, peer: str = "127.0.0.1") -> None:
        super().__init__()
        self.peer = peer
        self.written = b""
        self.closed = False
        self.closed_by_server = False  # closed before the test ended the connection
        self.aborted = False  # closed with its buffer dropped
        self.sockopts: list[tuple] = []  # what was set on the socket
        self.eof = False
        self.pauses, self.paused = 0, False
        self.buffered = 0  # what its write buffer holds (the test says)

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def write(self, data) -> None:
        self.written += bytes(data)

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = self.aborted = True

    def is_closing(self) -> bool:
        return self.closed

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def get_extra_info(self, name, default=None):
        return {"peername": (self.peer, 5000), "sockname": ("127.0.0.1", 8100), "socket": self}.get(name, default)

    # the transport stands in for its socket too
    def getpeername(self) -> tuple[str, int]:
        return (self.peer, 5000)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", 8100)

    def setsockopt(self, *option) -> None:
        self.sockopts.append(option)

    def pause_reading(self) -> None:
        self.pauses += 1
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


class EchoApp:
    """Answers each request with the size of its body; remembers the paths it served."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.header_names: list[list[bytes]] = []

    async def __call__(self, scope, receive, send) -> None:
        size, more = 0, True
        while more:
            message = await receive()
            size += len(message.get("body", b""))
            more = message.get("more_body", False)
        self.header_names.append([name for name, _ in scope["headers"]])  # after the body: trailers would be there
        self.paths.append(scope["path"])
        body = str(size).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


async def _connection(chunks: list[bytes], *, settle_s: float = 0.0, keep_alive_s: float = 5.0,
                      app: EchoApp | None = None):
    app = app or EchoApp()
    config = Config(app, http=GatewayHttpProtocol, lifespan="off", log_level="warning", server_header=False,
                    date_header=False, timeout_keep_alive=keep_alive_s)
    config.load()
    protocol = GatewayHttpProtocol(config, ServerState(), {}, _loop=asyncio.get_running_loop())
    transport = RecordingTransport()
    protocol.connection_made(transport)
    for chunk in chunks:
        if not transport.closed:
            protocol.data_received(chunk)
        await asyncio.sleep(0)
    for _ in range(20):  # the app's tasks
        await asyncio.sleep(0)
    await asyncio.sleep(settle_s)
    transport.closed_by_server = transport.closed
    if not transport.closed:
        protocol.connection_lost(None)
    return app, transport


def run(chunks: list[bytes], **kwargs):
    return asyncio.run(_connection(chunks, **kwargs))


def _refusal(transport: RecordingTransport) -> tuple[int, dict]:
    head, body = transport.written.split(b"\r\n\r\n", 1)
    return int(head.split(b" ")[1]), json.loads(body)["error"]


def _request(path: str = "/health", headers: bytes = b"", body: bytes = b"") -> bytes:
    return b"POST %s HTTP/1.1\r\nhost: x\r\n%scontent-length: %d\r\n\r\n%s" % (path.encode(), headers, len(body), body)


PAD_LINE = b"x-pad: " + b"a" * 1000 + b"\r\n"


@pytest.mark.parametrize("chunks", [
    [b"GET /health HTTP/1.1\r\nhost: x\r\n"] + [PAD_LINE] * 80,  # many headers
    [b"GET /health HTTP/1.1\r\nhost: x\r\nx-pad: "] + [b"a" * 1000] * 80,  # one header value that never ends
    [b"GET /" + b"a" * 1000] + [b"a" * 1000] * 80,  # a request line that never ends
], ids=["many-headers", "one-endless-value", "endless-url"])
def test_a_head_over_the_limit_is_431_and_closed_before_the_app_sees_it(monkeypatch, chunks):
    monkeypatch.setattr(http_protocol, "LINGER_S", 0.05)
    app, transport = run(chunks, settle_s=0.2)
    status, error = _refusal(transport)
    assert (status, error["code"]) == (431, "request_head_too_large")
    assert str(MAX_HEAD_BYTES) in error["message"]
    assert transport.eof and transport.closed_by_server and app.paths == []


def test_a_refused_connection_ends_its_side_and_drops_what_still_comes_before_closing():
    chunks = [b"GET /health HTTP/1.1\r\nhost: x\r\n"] + [PAD_LINE] * 80 + [_request("/after")]
    app, transport = run(chunks)  # LINGER_S not over yet
    assert transport.written.startswith(b"HTTP/1.1 431 ") and transport.eof and not transport.closed_by_server
    assert transport.written.count(b"HTTP/1.1") == 1 and app.paths == []  # the request after it was dropped


def test_a_refused_connection_that_keeps_sending_is_closed_at_once(monkeypatch):
    monkeypatch.setattr(http_protocol, "LINGER_BYTES", 5000)
    app, transport = run([b"GET /health HTTP/1.1\r\nhost: x\r\n"] + [PAD_LINE] * 90)
    assert transport.written.startswith(b"HTTP/1.1 431 ") and transport.closed_by_server


def test_a_large_head_under_the_limit_and_a_large_body_are_served():
    body = b"b" * 300_000
    request = _request(headers=PAD_LINE * 60, body=body)
    app, transport = run([request[i:i + 8192] for i in range(0, len(request), 8192)])
    assert transport.written.startswith(b"HTTP/1.1 200") and transport.written.endswith(b"300000")
    assert app.paths == ["/health"]


def test_a_head_and_a_large_body_in_one_chunk_are_served():
    app, transport = run([_request(body=b"b" * 300_000)])
    assert transport.written.startswith(b"HTTP/1.1 200") and app.paths == ["/health"]


def test_pipelined_requests_after_a_large_body_are_served():
    chunk = _request("/a", body=b"b" * 200_000) + _request("/b", headers=PAD_LINE * 30)
    app, transport = run([chunk, b""])
    assert app.paths == ["/a", "/b"] and transport.written.count(b"HTTP/1.1 200") == 2


def test_every_request_of_a_keep_alive_connection_gets_its_own_head_budget():
    requests = [_request(f"/{i}", headers=PAD_LINE * 50) for i in range(4)]  # 4 x 50 KB: each under the limit
    app, transport = run([piece for request in requests for piece in (request[:30_000], request[30_000:])])
    assert app.paths == ["/0", "/1", "/2", "/3"]


def test_a_head_that_does_not_arrive_in_time_is_408(monkeypatch):
    monkeypatch.setattr(http_protocol, "HEAD_TIMEOUT_S", 0.05)
    monkeypatch.setattr(http_protocol, "LINGER_S", 0.05)
    app, transport = run([b"GET /health HTTP/1.1\r\nhost: x\r\n"], settle_s=0.3)
    status, error = _refusal(transport)
    assert (status, error["code"]) == (408, "request_head_timeout") and transport.closed_by_server
    assert app.paths == []


def test_a_head_completed_in_time_is_not_timed_out(monkeypatch):
    monkeypatch.setattr(http_protocol, "HEAD_TIMEOUT_S", 0.05)
    request = _request()
    app, transport = run([request[:20], request[20:]], settle_s=0.2)  # the clock runs from the first chunk
    assert transport.written.startswith(b"HTTP/1.1 200") and b"408" not in transport.written


def test_a_connection_that_sends_nothing_is_closed_after_the_keep_alive_timeout():
    app, transport = run([], settle_s=0.2, keep_alive_s=0.05)
    assert transport.closed_by_server and transport.written == b""


def _chunked(parts: list[bytes], trailers: bytes = b"") -> bytes:
    framed = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts)
    head = b"POST /chunked HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
    return head + framed + b"0\r\n" + trailers + b"\r\n"


@pytest.mark.parametrize("count", [1000, 20_000])  # 20,000 chunks: 120 KB of framing for a 2 MB upload
def test_a_chunked_body_with_its_framing_and_a_trailer_is_served_and_the_trailer_not_kept(count):
    request = _chunked([b"p" * 100] * count, trailers=b"x-checksum: 1234\r\n")
    app, transport = run([request[i:i + 65536] for i in range(0, len(request), 65536)])
    assert app.paths == ["/chunked"] and transport.written.startswith(b"HTTP/1.1 200")
    assert transport.written.endswith(str(100 * count).encode())
    assert b"x-checksum" not in app.header_names[0]


@pytest.mark.parametrize("trailer_chunks", [
    [PAD_LINE] * 80,  # many trailers
    [b"x-trail: "] + [b"a" * 1000] * 80,  # one trailer value that never ends
], ids=["many-trailers", "one-endless-trailer"])
def test_endless_trailers_close_the_connection(trailer_chunks):
    opening = b"POST /chunked HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n"
    app, transport = run([opening, b"0\r\n", *trailer_chunks])
    assert transport.closed_by_server
    assert b"HTTP/1.1 200" not in transport.written  # the app never saw the body end


@pytest.mark.parametrize("headers", [b"a:\r\n" * (MAX_HEADERS + 1), b"a:\r\n" * 15_000],
                         ids=["one-over", "thousands-of-tiny-headers"])
def test_too_many_headers_are_431(monkeypatch, headers):
    monkeypatch.setattr(http_protocol, "LINGER_S", 0.05)
    app, transport = run([b"GET /health HTTP/1.1\r\nhost: x\r\n" + headers + b"\r\n"], settle_s=0.2)
    assert _refusal(transport)[0] == 431 and transport.closed_by_server and app.paths == []


def test_as_many_headers_as_allowed_are_served():
    app, transport = run([b"GET /health HTTP/1.1\r\n" + b"a:\r\n" * (MAX_HEADERS - 1) + b"host: x\r\n\r\n"])
    assert app.paths == ["/health"]


def test_the_chunk_a_head_begins_in_counts():
    app, transport = run([b"GET /health HTTP/1.1\r\nx-pad: " + b"a" * (MAX_HEAD_BYTES + 1)])
    assert _refusal(transport)[0] == 431 and app.paths == []


def test_pipelining_past_the_cap_closes_the_connection():
    app, transport = run([b"GET /p HTTP/1.1\r\nhost: x\r\n\r\n" * 1000])
    assert transport.closed_by_server and len(app.paths) <= 1 + MAX_PIPELINED


def test_bytes_trickled_between_requests_are_408(monkeypatch):
    monkeypatch.setattr(http_protocol, "HEAD_TIMEOUT_S", 0.05)
    monkeypatch.setattr(http_protocol, "LINGER_S", 0.05)
    app, transport = run([_request(), b"\r\n", b"\r\n"], settle_s=0.3)  # blank lines only, never a request
    assert app.paths == ["/health"] and b"HTTP/1.1 408 " in transport.written and transport.closed_by_server


class AnswerFirstApp(EchoApp):
    """Answers at once, reading none of the body (as a refusal does)."""

    async def __call__(self, scope, receive, send) -> None:
        self.paths.append(scope["path"])
        await send({"type": "http.response.start", "status": 401, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})


@pytest.mark.parametrize("rest", [b"", b"x" * 10], ids=["nothing", "a trickle"])
def test_an_answered_requests_body_that_does_not_end_closes_the_connection(monkeypatch, rest):
    monkeypatch.setattr(http_protocol, "DRAIN_TIMEOUT_S", 0.05)
    head = b"POST /slow HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n"
    app, transport = run([head, b"x" * 10, rest], settle_s=0.3, app=AnswerFirstApp())
    assert app.paths == ["/slow"] and transport.written.startswith(b"HTTP/1.1 401") and transport.closed_by_server


def test_a_body_the_app_is_still_reading_has_only_the_rate_deadline(monkeypatch):
    monkeypatch.setattr(http_protocol, "DRAIN_TIMEOUT_S", 0.05)  # the answered body's: not this one's
    head = b"POST /slow HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n"
    app, transport = run([head, b"x" * 10], settle_s=0.3)  # EchoApp reads the whole body before answering
    assert not transport.closed_by_server and transport.written == b""


async def _trickle(pieces: list[bytes], pause_s: float) -> tuple[EchoApp, RecordingTransport]:
    app = EchoApp()
    protocol, transport = _open(_config(app), ConnectionLimits.build(0, 100, []), "10.0.0.1")
    protocol.data_received(b"POST /upload HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % sum(map(len, pieces)))
    for piece in pieces:
        await asyncio.sleep(pause_s)
        if transport.closed:
            break
        protocol.data_received(piece)
    for _ in range(20):
        await asyncio.sleep(0)
    closed = transport.closed
    if not closed:
        protocol.connection_lost(None)
    transport.closed_by_server = closed
    return app, transport


def test_a_body_slower_than_the_minimum_rate_after_the_grace_is_closed_and_its_request_disconnected(monkeypatch):
    monkeypatch.setattr(http_protocol, "BODY_GRACE_S", 0.1)
    monkeypatch.setattr(http_protocol, "BODY_MIN_RATE_BPS", 1000)  # 10 bytes every 0.05 s: 200 bytes/s
    app, transport = asyncio.run(_trickle([b"x" * 10] * 20, pause_s=0.05))
    assert transport.closed_by_server and transport.written == b"", "the trickled body was read to its end"


def test_a_body_that_keeps_up_the_minimum_rate_is_served_however_long_it_takes(monkeypatch):
    monkeypatch.setattr(http_protocol, "BODY_GRACE_S", 0.1)
    monkeypatch.setattr(http_protocol, "BODY_MIN_RATE_BPS", 1000)  # 100 bytes every 0.05 s: 2,000 bytes/s
    app, transport = asyncio.run(_trickle([b"x" * 100] * 10, pause_s=0.05))
    assert not transport.closed_by_server and app.paths == ["/upload"] and transport.written.endswith(b"1000")


def test_a_reset_connection_lets_go_of_its_state_at_once():
    async def scenario():
        config = Config(EchoApp(), http=GatewayHttpProtocol, lifespan="off", log_level="warning")
        config.load()
        protocol = GatewayHttpProtocol(config, ServerState(), {}, _loop=asyncio.get_running_loop())
        protocol.connection_made(RecordingTransport())
        protocol.data_received(b"GET /health HTTP/1.1\r\nhost: x\r\n" + PAD_LINE * 10)  # a head in progress
        protocol.connection_lost(ConnectionResetError())
        return protocol

    protocol = asyncio.run(scenario())
    assert protocol.timeout_keep_alive_task is None and protocol.headers == [] and not protocol.pipeline


def test_a_whole_head_over_the_limit_in_one_read_is_431():
    app, transport = run([b"GET /health HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 100_000 + b"\r\n\r\n"])
    assert _refusal(transport)[0] == 431 and app.paths == []


def test_a_body_of_many_small_chunks_in_one_read_yields_to_the_others_and_is_served():
    request = _chunked([b"a"] * (3 * CHUNKS_PER_TURN))
    app, transport = run([request])
    assert transport.pauses >= 1 and not transport.paused  # paused for a turn, then read on
    assert app.paths == ["/chunked"] and transport.written.endswith(str(3 * CHUNKS_PER_TURN).encode())


def test_every_request_of_a_reset_connection_sees_the_disconnect():
    seen: dict[str, str] = {}

    async def waiting_app(scope, receive, send):
        await receive()  # the request (no body)
        seen[scope["path"]] = (await receive())["type"]  # waits: the next event is the disconnect

    async def scenario():
        config = Config(waiting_app, http=GatewayHttpProtocol, lifespan="off", log_level="warning")
        config.load()
        protocol = GatewayHttpProtocol(config, ServerState(), {}, _loop=asyncio.get_running_loop())
        protocol.connection_made(RecordingTransport())
        protocol.data_received(b"GET /a HTTP/1.1\r\nhost: x\r\n\r\nGET /b HTTP/1.1\r\nhost: x\r\n\r\n")
        for _ in range(5):
            await asyncio.sleep(0)
        protocol.connection_lost(ConnectionResetError())
        for _ in range(5):
            await asyncio.sleep(0)

    asyncio.run(scenario())
    assert seen == {"/a": "http.disconnect"}  # /b, queued behind it, never started


def test_uvicorns_own_400_for_a_malformed_pipelined_request_does_not_cut_the_answer_on_its_way():
    seen: dict[str, str] = {}

    async def waiting_app(scope, receive, send):
        await receive()
        seen[scope["path"]] = (await receive())["type"]

    async def scenario() -> RecordingTransport:
        config = Config(waiting_app, http=GatewayHttpProtocol, lifespan="off", log_level="error")
        config.load()
        protocol = GatewayHttpProtocol(config, ServerState(), {}, _loop=asyncio.get_running_loop())
        transport = RecordingTransport()
        protocol.connection_made(transport)
        protocol.data_received(b"GET /a HTTP/1.1\r\nhost: x\r\n\r\n")
        for _ in range(5):
            await asyncio.sleep(0)
        protocol.data_received(b"NOT HTTP AT ALL\r\n\r\n")  # a parse error while /a is being answered
        for _ in range(5):
            await asyncio.sleep(0)
        return transport

    transport = asyncio.run(scenario())
    assert transport.closed and transport.written == b""  # closed, no 400 written into /a's answer
    assert seen == {"/a": "http.disconnect"}


# -- connections counted against the server's limits (gateway/connection_limits.py) --------------------------------

def _config(app: EchoApp) -> Config:
    config = Config(app, http=GatewayHttpProtocol, lifespan="off", log_level="warning", server_header=False,
                    date_header=False)
    config.load()
    return config


def _open(config: Config, limits: ConnectionLimits, peer: str) -> tuple[GatewayHttpProtocol, RecordingTransport]:
    protocol = GatewayHttpProtocol(config, ServerState(), {}, _loop=asyncio.get_running_loop(), limits=limits)
    transport = RecordingTransport(peer)
    protocol.connection_made(transport)
    return protocol, transport


async def _served(protocol: GatewayHttpProtocol, transport: RecordingTransport) -> bool:
    protocol.data_received(_request())
    for _ in range(20):
        await asyncio.sleep(0)
    return transport.written.startswith(b"HTTP/1.1 200 ")


def test_a_connection_past_its_address_limit_is_429_lingering_never_read_and_its_place_comes_back(monkeypatch):
    monkeypatch.setattr(http_protocol, "LINGER_S", 0.05)

    async def scenario():
        app = EchoApp()
        config, limits = _config(app), ConnectionLimits.build(2, 100, [])
        held = [_open(config, limits, "10.0.0.1") for _ in range(2)]
        refused, transport = _open(config, limits, "10.0.0.1")
        status, error = _refusal(transport)
        assert (status, error["code"]) == (429, "too_many_connections")
        assert "10.0.0.1" in error["message"] and "max_connections_per_client" in error["message"]
        assert transport.eof and not transport.closed, "it lingers: the client reads the answer, not a reset"
        refused.data_received(_request("/refused"))  # what the client still sends is dropped
        await asyncio.sleep(0.1)
        assert transport.closed and app.paths == []
        other = _open(config, limits, "10.0.0.2")
        assert await _served(*held[0]) and await _served(*other), "the held connections and other addresses serve"
        refused.connection_lost(None)
        held[1][0].connection_lost(None)
        assert await _served(*_open(config, limits, "10.0.0.1")), "a closed connection's place is free again"
        return limits

    limits = asyncio.run(scenario())
    assert limits.held == 3 and limits.refusing == {}


def test_a_connection_past_the_total_is_503_and_closed_at_once():
    async def scenario():
        app = EchoApp()
        config, limits = _config(app), ConnectionLimits.build(0, 2, [])
        held = [_open(config, limits, f"10.0.0.{i}") for i in range(2)]
        refused, transport = _open(config, limits, "10.0.0.9")
        status, error = _refusal(transport)
        assert (status, error["code"]) == (503, "gateway_at_connection_limit") and "max_connections" in error["message"]
        assert transport.closed and not transport.eof, "no linger: it would hold the descriptors the limit keeps"
        refused.connection_lost(None)
        held[0][0].connection_lost(None)
        assert await _served(*_open(config, limits, "10.0.0.9"))

    asyncio.run(scenario())


def test_loopback_has_no_per_client_limit_and_no_limits_means_none():
    async def scenario():
        config = _config(EchoApp())
        limits = ConnectionLimits.build(1, 100, ["127.0.0.0/8"])
        assert all([await _served(*_open(config, limits, "127.0.0.1")) for _ in range(5)])
        protocol = GatewayHttpProtocol(config, ServerState(), {}, _loop=asyncio.get_running_loop())
        transport = RecordingTransport("10.0.0.1")
        protocol.connection_made(transport)
        assert await _served(protocol, transport)

    asyncio.run(scenario())


# -- answers the client does not read -------------------------------------------------------------------------------

class WaitingApp:
    """Answers with a first piece, then (when the test lets it) a second: the second send waits while the transport
    is paused for writing, as uvicorn's does."""

    def __init__(self) -> None:
        self.sent_second: bool | None = None  # None: not reached; False: the send returned on a lost connection

    async def __call__(self, scope, receive, send) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"8")]})
        await send({"type": "http.response.body", "body": b"1234", "more_body": True})
        await send({"type": "http.response.body", "body": b"5678"})
        self.sent_second = not self.transport_closed()

    transport_closed = staticmethod(lambda: False)


def test_an_answer_the_client_does_not_read_is_aborted_after_the_stall_and_its_request_sees_a_disconnect(monkeypatch):
    monkeypatch.setattr(http_protocol, "WRITE_STALL_S", 0.1)

    async def scenario():
        app = WaitingApp()
        protocol, transport = _open(_config(app), ConnectionLimits.build(0, 100, []), "10.0.0.1")
        app.transport_closed = lambda: transport.closed
        protocol.pause_writing()  # the client reads nothing: the transport's buffer is past its high-water mark
        protocol.data_received(_request())
        await asyncio.sleep(0.05)
        assert app.sent_second is None and not transport.closed, "the second piece waits for the client to read"
        await asyncio.sleep(0.15)
        aborted = transport.aborted  # a close would wait for the buffer to drain
        protocol.connection_lost(None)  # what the abort leads to (and the end of the test's connection otherwise)
        await asyncio.sleep(0.01)
        return app, protocol, aborted

    app, protocol, aborted = asyncio.run(scenario())
    assert aborted, "the connection was not aborted after the stall"
    linger = (socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    assert protocol.transport.sockopts == [SEND_BUFFER, linger], "the kernel would keep what it queued for minutes"
    assert app.sent_second is False and protocol.cycle.disconnected


def test_a_client_that_reads_in_time_is_not_aborted(monkeypatch):
    monkeypatch.setattr(http_protocol, "WRITE_STALL_S", 0.1)

    async def scenario():
        app = WaitingApp()
        protocol, transport = _open(_config(app), ConnectionLimits.build(0, 100, []), "10.0.0.1")
        for _ in range(3):  # paused and resumed again and again, each pause shorter than the stall
            protocol.pause_writing()
            await asyncio.sleep(0.06)
            protocol.resume_writing()
        protocol.data_received(_request())
        await asyncio.sleep(0.05)
        return app, transport

    app, transport = asyncio.run(scenario())
    assert app.sent_second is True and not transport.aborted
    assert transport.written.endswith(b"12345678")


SEND_BUFFER = (socket.SOL_SOCKET, socket.SO_SNDBUF, http_protocol.SEND_BUFFER_BYTES)
LINGER_0 = (socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


@pytest.mark.parametrize(("unsent", "aborted"), [(1, True), (0, False)])
@pytest.mark.parametrize("closing", [
    pytest.param(lambda protocol: protocol.timeout_keep_alive_handler(), id="idle-past-keep-alive"),  # a close left
    # an answer that fit the kernel's buffers queued for minutes (FIN-WAIT-1, outside every limit)
    pytest.param(lambda protocol: protocol.shutdown(), id="server-stopping"),  # the drained close would have kept
    # `serve` waiting for clients that never read
])
def test_a_connection_closed_with_its_last_answer_unread_is_aborted_and_with_none_closed(closing, unsent, aborted):
    async def scenario():
        protocol, transport = _open(_config(EchoApp()), ConnectionLimits.build(0, 100, []), "10.0.0.1")
        transport.buffered = unsent
        closing(protocol)
        return transport

    transport = asyncio.run(scenario())
    assert transport.closed and transport.aborted is aborted
    assert transport.sockopts == ([SEND_BUFFER, LINGER_0] if aborted else [SEND_BUFFER])


def test_a_half_close_closes_through_the_drained_close():
    """uvicorn let the transport close itself on a client's half-close: past every deadline and limit."""
    async def scenario():
        protocol, transport = _open(_config(EchoApp()), ConnectionLimits.build(0, 100, []), "10.0.0.1")
        transport.buffered = 1
        keeps_open = protocol.eof_received()
        closed_now = transport.closed
        transport.buffered = 0
        await asyncio.sleep(0.2)
        return keeps_open, closed_now, transport

    keeps_open, closed_now, transport = asyncio.run(scenario())
    assert keeps_open is True and not closed_now, "the transport closed itself with an answer still queued"
    assert transport.closed and not transport.aborted  # once the client had it


def test_the_app_drops_its_connection_through_the_scope_extension():
    seen = []

    class Dropping:
        async def __call__(self, scope, receive, send):
            seen.append(http_protocol.ABORT_EXTENSION in scope["extensions"])
            scope["extensions"][http_protocol.ABORT_EXTENSION]("was too slow")
            await send({"type": "http.response.start", "status": 200, "headers": []})

    async def scenario():
        protocol, transport = _open(_config(Dropping()), ConnectionLimits.build(0, 100, []), "10.0.0.1")
        protocol.data_received(_request())
        await asyncio.sleep(0.05)
        return protocol, transport

    protocol, transport = asyncio.run(scenario())
    assert seen == [True] and transport.aborted and LINGER_0 in transport.sockopts
    assert b"200" not in transport.written  # the answer went nowhere


def test_a_websocket_upgrade_is_served_as_a_plain_request_and_gives_its_place_back():
    """uvicorn handed an upgrade to its WebSocket protocol, and this connection's place was never given back."""
    upgrade = b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: websocket\r\n" \
              b"sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"

    async def scenario():
        app = EchoApp()
        config, limits = _config(app), ConnectionLimits.build(2, 100, [])
        for _ in range(5):
            protocol, transport = _open(config, limits, "10.0.0.1")
            protocol.data_received(upgrade)
            for _ in range(20):
                await asyncio.sleep(0)
            assert transport.written.startswith(b"HTTP/1.1 200 "), "answered by its route, not switched"
            protocol.connection_lost(None)
        return app, limits

    app, limits = asyncio.run(scenario())
    assert app.paths == ["/health"] * 5 and (limits.held, limits.by_client) == (0, {})
