"""The request bytes in flight (gateway/request_bytes.py): charged per rollout and in all while a request is
handled, refused past either share, released when it ends, and nothing charged before the route reads."""

from __future__ import annotations

import asyncio

import pytest

from gateway.request_bytes import RequestBytes, RequestBytesFull, RequestBytesInFlight


def _receive(*bodies: bytes):
    messages = [{"type": "http.request", "body": body, "more_body": i < len(bodies) - 1}
                for i, body in enumerate(bodies)]

    async def receive() -> dict:
        return messages.pop(0)
    return receive


async def _read(receive) -> bytes:
    chunks, more = [], True
    while more:
        message = await receive()
        chunks.append(message["body"])
        more = message["more_body"]
    return b"".join(chunks)


def test_the_declared_length_is_charged_at_the_first_read_and_released_at_the_end():
    ledger = RequestBytes(per_rollout=100, total=1000)

    async def scenario():
        with ledger.holding("r1") as held:
            receive = held.counting(_receive(b"x" * 30, b"y" * 30), declared_bytes=lambda: 60)
            assert ledger.held == 0, "nothing charged before the route reads (a stranger is refused before that)"
            assert await _read(receive) == b"x" * 30 + b"y" * 30
            assert (ledger.held, ledger.by_rollout) == (60, {"r1": 60})
        assert (ledger.held, ledger.by_rollout) == (0, {})

    asyncio.run(scenario())


def test_a_chunked_body_is_charged_as_it_arrives_and_refused_past_the_rollouts_share():
    ledger = RequestBytes(per_rollout=100, total=1000)

    async def scenario():
        with ledger.holding("r1") as first:
            await _read(first.counting(_receive(b"a" * 70), declared_bytes=lambda: 0))
            with ledger.holding("r1") as second:
                receive = second.counting(_receive(b"b" * 20, b"c" * 20), declared_bytes=lambda: 0)
                assert (await receive())["body"] == b"b" * 20
                with pytest.raises(RequestBytesInFlight) as refused:
                    await receive()
                assert ledger.by_rollout == {"r1": 90}, "the refused chunk is not charged"
            with ledger.holding("r2") as other:
                await _read(other.counting(_receive(b"d" * 90), declared_bytes=lambda: 90))
        return refused.value

    error = asyncio.run(scenario())
    assert (error.status, error.code) == (429, "request_bytes_in_flight")
    assert "max_request_bytes_in_flight_per_rollout" in error.message and "'r1'" in error.message
    assert (ledger.held, ledger.by_rollout) == (0, {})


def test_the_process_total_is_503_with_retry_after():
    ledger = RequestBytes(per_rollout=100, total=150)

    async def scenario():
        with ledger.holding("r1") as first:
            await _read(first.counting(_receive(b"a" * 100), declared_bytes=lambda: 100))
            with ledger.holding("r2") as second, pytest.raises(RequestBytesFull) as refused:
                await second.counting(_receive(b"b" * 60), declared_bytes=lambda: 60)()
        return refused.value

    error = asyncio.run(scenario())
    assert (error.status, error.code, error.headers()) == (503, "gateway_request_bytes_full", {"retry-after": "1"})
    assert (ledger.held, ledger.by_rollout) == (0, {})


def test_a_handler_that_fails_releases_what_it_held():
    ledger = RequestBytes(per_rollout=100, total=1000)

    async def scenario():
        with pytest.raises(RuntimeError), ledger.holding("r1") as held:
            await _read(held.counting(_receive(b"a" * 50), declared_bytes=lambda: 50))
            raise RuntimeError("the upstream failed")

    asyncio.run(scenario())
    assert (ledger.held, ledger.by_rollout) == (0, {})
