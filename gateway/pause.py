"""Pause, drain, resume: a gate in front of upstream dispatch for collocated training.

While paused, new calls are held (not rejected) for at most `hold_timeout_s`; `pause` returns once no call is in
flight (or `drain_timeout_s` passes); `resume` releases the held calls. `paused_s` counts the seconds spent paused
since start, so a controller can extend its harnesses' time limits by the time their calls were held.

The gate is one process's. Several gateways on one store pause together through `gateway.fleet`, which sets and
releases each process's gate (`hold`, `release`) from the pause kept in the store and waits for every gateway's
drain; `on_drained` tells it when this process's last call in flight finished while paused.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import suppress

from gateway.errors import PausedTooLong
from gateway.records import PauseResult


class PauseGate:
    """Counts calls in flight and holds new ones while paused."""

    def __init__(self, hold_timeout_s: float) -> None:
        self.hold_timeout_s = hold_timeout_s
        self.paused = False
        self.in_flight = 0
        self.held = 0
        self.on_drained: Callable[[], None] | None = None  # called when the last call in flight ends while paused
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._paused_since: float | None = None
        self._paused_before_s = 0.0

    @property
    def paused_s(self) -> float:
        """Seconds spent paused since the gateway started, the current pause included."""
        current_s = time.monotonic() - self._paused_since if self._paused_since is not None else 0.0
        return self._paused_before_s + current_s

    def admit(self) -> _Admission:
        """`async with` it before dispatching upstream; it is left once the upstream answer is complete."""
        return _Admission(self)

    async def _enter(self) -> None:
        if self.paused:
            await self._hold()
        self.in_flight += 1
        self._idle.clear()

    def _leave(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()
            if self.paused and self.on_drained is not None:
                self.on_drained()

    async def _hold(self) -> None:
        self.held += 1
        deadline = time.monotonic() + self.hold_timeout_s
        try:
            while self.paused:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise PausedTooLong(f"the gateway has been paused for more than {self.hold_timeout_s:g} s; "
                                        "retry later or raise pause_hold_timeout_s")
                try:
                    await asyncio.wait_for(self._resumed.wait(), timeout=remaining)
                except TimeoutError:
                    continue
        finally:
            self.held -= 1

    def hold(self) -> None:
        """Hold every call admitted from now on (calls in flight go on)."""
        self.paused = True
        self._resumed.clear()
        if self._paused_since is None:
            self._paused_since = time.monotonic()

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait until nothing is in flight, at most `timeout_s`; whether nothing is."""
        with suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout=timeout_s)
        return self.in_flight == 0

    async def pause(self, drain_timeout_s: float) -> PauseResult:
        """Stop dispatching and wait until nothing is in flight."""
        started = time.monotonic()
        self.hold()
        await self.wait_idle(drain_timeout_s)
        return self.snapshot(waited_ms=(time.monotonic() - started) * 1000)

    def release(self) -> None:
        """Release held calls."""
        self.paused = False
        self._resumed.set()
        if self._paused_since is not None:
            self._paused_before_s += time.monotonic() - self._paused_since
            self._paused_since = None

    def resume(self) -> PauseResult:
        """Release held calls."""
        self.release()
        return self.snapshot(waited_ms=0.0)

    def snapshot(self, waited_ms: float) -> PauseResult:
        """Current counters."""
        return PauseResult(paused=self.paused, in_flight=self.in_flight, held=self.held,
                           drained=self.in_flight == 0, waited_ms=waited_ms)


class _Admission:
    """One call's passage through the gate (a class, not contextlib's generator: a quarter of its cost a call)."""

    def __init__(self, gate: PauseGate) -> None:
        self._gate = gate

    async def __aenter__(self) -> None:
        await self._gate._enter()  # held while paused; PausedTooLong past the hold timeout (nothing entered)

    async def __aexit__(self, *exc_info) -> None:
        self._gate._leave()
