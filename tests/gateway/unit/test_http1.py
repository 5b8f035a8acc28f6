"""The lean HTTP/1.1 client of unary engine calls (`gateway.http1`), against raw servers written byte by byte."""

from __future__ import annotations

import asyncio
import base64
import gzip
import time
import zlib
from urllib.parse import urlsplit

import pytest

from gateway import http1
from gateway.http1 import Http1Pool, UpstreamConnectionError, UpstreamPayloadError


class RawServer:
    """A loopback server answering each request with the next of `answers` (bytes written as they are; None: close
    without answering); counts connections and keeps what it was sent."""

    def __init__(self, answers: list[bytes | None], close_after_each: bool = False) -> None:
        self.answers, self.close_after_each = list(answers), close_after_each
        self.connections, self.requests = 0, []

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1/chat/completions"

    async def __aexit__(self, *exc) -> None:
        self._server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                self.requests.append(head + await reader.readexactly(length))
                answer = self.answers.pop(0)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
                if self.close_after_each:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


def ok(body: bytes, *headers: str) -> bytes:
    head = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 200 OK\r\ncontent-length: {len(body)}\r\n{head}\r\n".encode() + body


def posts(server: RawServer, bodies: list[bytes], pause_s: float = 0.0, url_of=lambda url: url) -> list:
    """Each body posted in turn through one pool (`pause_s` apart) to `server`; the answers."""
    async def go():
        async with server as url:
            pool = Http1Pool()
            answers = []
            try:
                for i, body in enumerate(bodies):
                    if i:
                        await asyncio.sleep(pause_s)
                    answers.append(await pool.post(url_of(url), body))
            finally:
                pool.close()
            return answers

    return asyncio.run(go())


def one(answer: bytes | None):
    """The answer to one call whose connection closes after `answer`."""
    return posts(RawServer([answer], close_after_each=True), [b"{}"])[0]


def test_a_keep_alive_connection_carries_the_next_call_and_the_request_is_well_formed() -> None:
    server = RawServer([ok(b'{"a": 1}', "X-Policy-Version: 7"), ok(b'{"b": 2}')])
    first, second = posts(server, [b'{"q": 1}', b'{"q": 2}'])
    assert (first.status, first.body, first.headers["x-policy-version"]) == (200, b'{"a": 1}', "7")
    assert second.body == b'{"b": 2}' and server.connections == 1
    assert server.requests[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:")
    assert server.requests[0].endswith(b"Content-Length: 8\r\n\r\n{\"q\": 1}")


@pytest.mark.parametrize(("answer", "body"), [
    (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", b"abcde"),
    (b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end", b"until the end"),
    (ok(gzip.compress(b"zipped"), "content-encoding: gzip"), b"zipped"),
    (ok(zlib.compress(b"deflated"), "content-encoding: deflate"), b"deflated"),
    (b"HTTP/1.1 204 No Content\r\n\r\n", b""),
], ids=["chunked", "close-delimited", "gzip", "deflate", "no body"])
def test_every_way_an_answer_body_may_be_framed_is_read_whole(answer, body) -> None:
    assert one(answer).body == body


@pytest.mark.parametrize(("answer", "error", "words"), [
    (None, UpstreamConnectionError, "before its answer"),
    (b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nshort", UpstreamPayloadError, "before the end"),
    (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nab", UpstreamPayloadError, "before the end"),
    (b"SMTP ready\r\n\r\n", UpstreamPayloadError, "not valid HTTP"),
    (ok(b"not gzip", "content-encoding: gzip"), UpstreamPayloadError, "does not decode"),
    (ok(b"x", "content-encoding: br"), UpstreamPayloadError, "does not decode"),
], ids=["closed before the head", "cut body", "cut chunks", "not HTTP", "bad gzip", "unknown encoding"])
def test_a_broken_answer_is_a_named_error(answer, error, words) -> None:
    with pytest.raises(error, match=words):
        one(answer)


def test_nobody_listening_is_a_connection_error_and_a_bad_url_a_value_error() -> None:
    def post(url):
        asyncio.run(Http1Pool(connect_timeout_s=2).post(url, b"{}"))

    with pytest.raises(UpstreamConnectionError, match="cannot connect"):
        post("http://127.0.0.1:9/v1/chat/completions")
    for url in ("https://127.0.0.1/v1", "http:///v1", "ftp://x/"):
        with pytest.raises(ValueError, match="not an http:// URL"):
            post(url)


def test_a_connection_the_engine_closed_while_idle_is_not_reused() -> None:
    server = RawServer([ok(b"1"), ok(b"2")], close_after_each=True)
    _, second = posts(server, [b"{}", b"{}"], pause_s=0.05)  # the server's close reaches the idle connection
    assert second.body == b"2" and server.connections == 2


def test_a_cancelled_call_closes_its_connection() -> None:
    async def go():
        server = RawServer([b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nslow", ok(b"next")])
        async with server as url:
            pool = Http1Pool()
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):
                    await pool.post(url, b"{}")
            answer = await pool.post(url, b"{}")  # on a new connection: the old one's leftovers are not read
            pool.close()
        return server, answer

    server, answer = asyncio.run(go())
    assert answer.body == b"next" and server.connections == 2


SLOW = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nslow"  # 4 bytes of 10: never whole (the server then waits)


def test_an_answer_not_whole_within_the_pools_timeout_is_a_timeout_and_its_connection_is_not_reused() -> None:
    async def go():
        async with RawServer([SLOW, ok(b"next")]) as url:
            pool = Http1Pool(answer_timeout_s=0.2)
            started = time.monotonic()
            with pytest.raises(TimeoutError, match="not whole within 0.2 s"):
                await pool.post(url, b"{}")
            waited = time.monotonic() - started
            answer = await pool.post(url, b"{}")
            pool.close()
        return waited, answer

    waited, answer = asyncio.run(go())
    assert waited >= 0.2 and answer.body == b"next"


def test_each_call_has_its_own_deadline_on_the_pools_one_timer() -> None:
    """A call that ended leaves the timer armed for its deadline; a later call is not cut at that deadline but at its
    own, and calls in flight together each time out."""
    async def go():
        async with (RawServer([ok(b"fast")]) as fast, RawServer([SLOW, None]) as slow_a,
                    RawServer([SLOW, None]) as slow_b):
            pool = Http1Pool(answer_timeout_s=0.3)
            assert (await pool.post(fast, b"{}")).body == b"fast"
            await asyncio.sleep(0.2)  # the first call's deadline is 0.1 s away
            started = time.monotonic()
            results = await asyncio.gather(pool.post(slow_a, b"{}"), pool.post(slow_b, b"{}"), return_exceptions=True)
            waited = time.monotonic() - started
            pool.close()
        return waited, results

    waited, results = asyncio.run(go())
    assert waited >= 0.3 and all(isinstance(result, TimeoutError) for result in results)


def test_interim_answers_are_skipped_and_an_upgrade_is_not_an_answer() -> None:
    for interim in (b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n"):
        answer = one(interim + ok(b"final"))
        assert (answer.status, answer.body) == (200, b"final")
    with pytest.raises(UpstreamPayloadError, match="not valid HTTP"):
        one(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n")


def test_bytes_after_an_answer_close_its_connection() -> None:
    server = RawServer([ok(b"1") + ok(b"stray"), ok(b"2")])
    first, second = posts(server, [b"{}", b"{}"])
    assert (first.body, second.body, server.connections) == (b"1", b"2", 2)


def test_a_connection_idle_past_the_keep_alive_is_not_reused(monkeypatch) -> None:
    monkeypatch.setattr(http1, "IDLE_KEEPALIVE_S", 0.05)

    at_once = RawServer([ok(b"1"), ok(b"2")])
    posts(at_once, [b"{}", b"{}"])
    idle = RawServer([ok(b"1"), ok(b"2")])
    posts(idle, [b"{}", b"{}"], pause_s=0.1)
    assert (at_once.connections, idle.connections) == (1, 2)


def test_the_host_header_never_carries_the_urls_credentials() -> None:
    server = RawServer([ok(b"1")], close_after_each=True)
    posts(server, [b"{}"], url_of=lambda url: url.replace("http://", "http://us%40er:s3cret@"))
    head = server.requests[0].decode()
    assert "s3cret" not in head.split("Authorization")[0] and "\r\nHost: 127.0.0.1:" in head
    assert "Authorization: Basic " + base64.b64encode(b"us@er:s3cret").decode() + "\r\n" in head
    assert http1._host_header(urlsplit("http://[::1]:8000/v1")) == "[::1]:8000"
    assert http1._host_header(urlsplit("http://engine/v1")) == "engine"
