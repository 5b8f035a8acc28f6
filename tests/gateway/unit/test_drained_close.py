"""A connection's close waits for its client to have what was sent, then closes; past its deadline it resets
(gateway/drained_close.py): the kernel never keeps an answer queued for a client after the gateway let go."""

from __future__ import annotations

import asyncio
import socket
import struct

from gateway import drained_close
from gateway.drained_close import DrainingTransport

LINGER_0 = (socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class Transport:
    """What was done to the connection; `buffered` is what it still holds for the client (the test says)."""

    def __init__(self) -> None:
        self.buffered, self.closed, self.aborted, self.reading, self.sockopts = 0, False, False, True, []
        self.written = b""

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def get_extra_info(self, name, default=None):
        return self if name == "socket" else default

    def setsockopt(self, *option) -> None:
        self.sockopts.append(option)

    def write(self, data) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = self.aborted = True

    def pause_reading(self) -> None:
        self.reading = False


def _closed(buffered: int, drains_after_s: float | None, wait_s: float) -> tuple[Transport, list[str], bool]:
    async def scenario():
        inner, resets = Transport(), []
        outer = DrainingTransport(inner, asyncio.get_running_loop(), resets.append)
        inner.buffered = buffered
        outer.write(b"answer")
        outer.close()
        closed_at_once = inner.closed
        if drains_after_s is not None:
            await asyncio.sleep(drains_after_s)
            inner.buffered = 0
        await asyncio.sleep(wait_s)
        assert outer.is_closing()
        return inner, resets, closed_at_once

    return asyncio.run(scenario())


def test_nothing_left_to_send_closes_at_once() -> None:
    inner, resets, at_once = _closed(0, None, 0.0)
    assert at_once and not inner.aborted and resets == [] and inner.written == b"answer"


def test_a_close_waits_for_the_client_to_read_what_is_queued_then_closes() -> None:
    inner, resets, at_once = _closed(300_000, 0.2, 0.3)
    assert not at_once and inner.closed and not inner.aborted and resets == [] and not inner.reading


def test_a_client_that_does_not_read_before_the_deadline_is_reset(monkeypatch) -> None:
    monkeypatch.setattr(drained_close, "GRACE_S", 0.2)
    monkeypatch.setattr(drained_close, "MIN_RATE_BPS", 10**9)
    inner, resets, at_once = _closed(300_000, None, 0.6)
    assert not at_once and inner.aborted and inner.sockopts == [LINGER_0] and len(resets) == 1
