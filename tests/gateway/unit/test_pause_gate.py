"""PauseGate bounds: a call held longer than hold_timeout_s fails with 503; a drain that times out says so."""

from __future__ import annotations

import asyncio

import pytest

from gateway.errors import PausedTooLong
from gateway.pause import PauseGate


def test_a_call_held_past_the_hold_timeout_fails_with_paused_too_long() -> None:
    async def main() -> None:
        gate = PauseGate(hold_timeout_s=0.2)
        await gate.pause(drain_timeout_s=1.0)
        with pytest.raises(PausedTooLong, match="0.2 s"):
            async with gate.admit():
                pass
        assert (gate.held, gate.in_flight) == (0, 0)

    asyncio.run(main())


def test_a_drain_that_times_out_reports_the_calls_still_in_flight() -> None:
    async def main() -> None:
        gate = PauseGate(hold_timeout_s=5.0)
        release = asyncio.Event()

        async def in_flight() -> None:
            async with gate.admit():
                await release.wait()

        task = asyncio.create_task(in_flight())
        await asyncio.sleep(0)
        result = await gate.pause(drain_timeout_s=0.1)
        assert result.paused and not result.drained and result.in_flight == 1
        release.set()
        await task
        assert gate.resume().drained

    asyncio.run(main())


def test_held_calls_go_through_once_resumed() -> None:
    async def main() -> None:
        gate = PauseGate(hold_timeout_s=5.0)
        await gate.pause(drain_timeout_s=1.0)
        entered = asyncio.Event()

        async def held() -> None:
            async with gate.admit():
                entered.set()

        task = asyncio.create_task(held())
        await asyncio.sleep(0.05)
        assert gate.held == 1 and not entered.is_set()
        gate.resume()
        await asyncio.wait_for(task, 1.0)
        assert entered.is_set() and gate.held == 0

    asyncio.run(main())
