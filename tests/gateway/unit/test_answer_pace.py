"""An answer's pace (gateway/answer_pace.py): once its sends have waited on the client for the grace in all, the
answer must have gone out at the minimum rate over that waiting, or the connection is dropped once; bursts do not
help; a client that keeps up is never dropped; without the server's extension nothing is paced."""

from __future__ import annotations

import asyncio

import pytest

from gateway.answer_pace import GRACE_S, MIN_RATE_BPS, AnswerPace
from gateway.http_protocol import ABORT_EXTENSION

PIECE = 256 * 1024


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(waits_s: list[float], piece: int = PIECE) -> tuple[AnswerPace, list[str], int]:
    """Send one piece per entry of `waits_s`, each send waiting that long on the client: (the pace, the drops, the
    pieces the client was sent before the drop)."""
    clock, dropped, sent = Clock(), [], []

    async def send(message: dict) -> None:
        clock.now += waits_s[len(sent)]
        sent.append(message)

    async def answer() -> AnswerPace:
        pace = AnswerPace(dropped.append, clock)
        paced = pace.paced(send)
        for _ in waits_s:
            await paced({"type": "http.response.body", "body": b"x" * piece, "more_body": True})
        return pace

    pace = asyncio.run(answer())
    return pace, dropped, len(sent)


def test_a_client_reading_what_waits_on_it_at_the_rate_is_served_whatever_the_size() -> None:
    pace, dropped, _ = run([PIECE / (2 * MIN_RATE_BPS)] * 400)  # 100 MB at twice the rate, always waited on
    assert dropped == [] and pace.waited_s > GRACE_S


def test_a_slow_client_is_dropped_once_after_the_grace() -> None:
    pace, dropped, _ = run([PIECE / (MIN_RATE_BPS / 4)] * 20)  # a quarter of the rate: 4 s a piece
    assert len(dropped) == 1 and "KiB/s" in dropped[0] and pace.dropped
    assert GRACE_S < pace.waited_s <= GRACE_S + PIECE / (MIN_RATE_BPS / 4)  # dropped at the first send past it


def test_bursts_do_not_buy_time() -> None:
    """Stop for 9 s (under the grace and the write stall), then read 4 pieces at once, again and again."""
    pace, dropped, _ = run([9.0, 0.0, 0.0, 0.0] * 10)
    assert len(dropped) == 1 and pace.waited_s <= 2 * 9.0


def test_a_fast_client_never_waited_on_is_never_dropped_and_a_stream_of_slow_tokens_is_not_its_fault() -> None:
    pace, dropped, _ = run([0.0] * 1000, piece=100)
    assert dropped == [] and pace.waited_s == 0.0


@pytest.mark.parametrize("extensions", [{}, {"other": print}])
def test_without_the_servers_extension_send_is_left_as_it_is(extensions) -> None:
    async def send(message: dict) -> None: ...

    assert AnswerPace.of({"extensions": extensions}).paced(send) is send
    assert AnswerPace.of({"extensions": {ABORT_EXTENSION: print}}).paced(send) is not send
