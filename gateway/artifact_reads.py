"""Artifact answers a harness is being sent: one at a time per rollout, and a bounded number of bytes in all.

A harness may read back its own artifacts (up to `max_body_bytes` each) as often as it likes, and an answer waits
in memory until the client has read it: 16 connections asking for a 32 MB artifact and reading nothing held 520 MB
(`http_protocol.py` now aborts such a connection after `WRITE_STALL_S`, but a pod's 256 connections could hold 8 GB
until then). `ArtifactReads` admits a read before its artifact is loaded from the store:

- a rollout reads one artifact at a time (a harness pod holds one rollout's key: one pod, one read);
- the reads in flight hold at most `max_bytes` (`artifact_read_bytes_in_flight`): a read reserves its artifact's
  stored size (read first, its bytes unread; `max_body_bytes` where it is not known) until its answer is handed to
  the connection (in pieces: the client has read all but the last; one reading slower than
  `answer_pace.MIN_RATE_BPS` is dropped, so a read does not stay in flight at a trickle);
- a read that cannot start within `READ_WAIT_S` is refused, 503 `artifact_reads_busy` with `Retry-After`.
A read of one artifact larger than `max_bytes` (stored under a larger `max_body_bytes`) starts when nothing else is
in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from gateway.errors import RetryLater

READ_WAIT_S = 60.0
"""How long a read waits to start (its rollout's previous read to end, or room among the bytes in flight)."""


class ArtifactReadsBusy(RetryLater):
    """No room for another artifact read within the wait: nothing was read; retry after `retry_after_s`."""

    code = "artifact_reads_busy"


class ArtifactRead:
    """One admitted read: its reservation, set to the artifact's size once loaded (`loaded`)."""

    def __init__(self, reads: ArtifactReads, reserved: int) -> None:
        self._reads, self.reserved = reads, reserved

    def loaded(self, size_bytes: int) -> None:
        """The artifact is in memory: hold its size instead of the worst case (a smaller one lets others start)."""
        self._reads.resize(self, size_bytes)


class ArtifactReads:
    """The artifact reads in flight in one gateway process (the event loop's: not thread-safe)."""

    def __init__(self, max_bytes: int, reserve_bytes: int, wait_s: float | None = None) -> None:
        self.max_bytes = max_bytes  # the most bytes the reads in flight hold
        self.reserve_bytes = reserve_bytes  # what a read holds until its artifact is loaded
        self._wait_s = wait_s  # how long a read waits to start before 503 (None: READ_WAIT_S)
        self.in_flight_bytes = 0
        self.rollouts: set[str] = set()
        self._waiters: list[asyncio.Future[None]] = []

    @contextlib.asynccontextmanager
    async def reading(self, rollout_id: str, size_bytes: int | None = None) -> AsyncIterator[ArtifactRead]:
        """Admit one read of `rollout_id`'s, of an artifact of `size_bytes` as stored (None: not known, the most an
        artifact weighs), waiting for room at most `READ_WAIT_S`, and hold it for the block."""
        reserved = self.reserve_bytes if size_bytes is None else size_bytes
        await self._wait_for_room(rollout_id, reserved)
        self.rollouts.add(rollout_id)
        read = ArtifactRead(self, reserved)
        self.in_flight_bytes += read.reserved
        try:
            yield read
        finally:
            self.rollouts.discard(rollout_id)
            self.resize(read, 0)

    def resize(self, read: ArtifactRead, size_bytes: int) -> None:
        """`read` holds `size_bytes` from now on; the reads waiting look again."""
        self.in_flight_bytes += size_bytes - read.reserved
        read.reserved = size_bytes
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def _wait_for_room(self, rollout_id: str, size_bytes: int) -> None:
        loop = asyncio.get_running_loop()
        wait_s = READ_WAIT_S if self._wait_s is None else self._wait_s
        deadline = loop.time() + wait_s
        while not self._room_for(rollout_id, size_bytes):
            waiter = loop.create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    await waiter
            except TimeoutError:
                raise ArtifactReadsBusy(
                    f"no artifact read could start within {wait_s:g} s: this rollout's previous read is still "
                    f"being sent, or the gateway is sending {self.max_bytes} bytes of artifacts "
                    "(artifact_read_bytes_in_flight); read artifacts one at a time and read their answers whole, "
                    "then retry") from None
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def _room_for(self, rollout_id: str, size_bytes: int) -> bool:
        if rollout_id in self.rollouts:
            return False
        return self.in_flight_bytes == 0 or self.in_flight_bytes + size_bytes <= self.max_bytes
