"""Call numbers taken in a PostgreSQL store, for several gateways on it: batched, on the event loop.

Each call's number within its rollout attempt comes from the rollout's row (`rollouts.next_seq`): one above the
highest number taken or recorded in that attempt, refused (None) once the attempt is over or the rollout finished (a
change another gateway made). Requests made during one loop iteration, and those arriving while a statement is under
way, go in one statement (group numbering, as the committer group-commits): a key asked k times gets k consecutive
numbers, handed out in arrival order. The rows are locked in id order (no deadlock between gateways numbering the
same rollouts), each statement commits on its own with synchronous_commit off: a number whose commit a crash loses
is held by no recorded call (a call row committed later sits after it in the WAL, whose flush writes it first).

The connection is psycopg's own (async, autocommit) on the gateway's event loop: no thread hand-off, no SQLAlchemy on
the hot path.
"""

from __future__ import annotations

import asyncio
import logging

import sqlalchemy as sa

from gateway.committer import POSTGRES_LOCK_NOT_AVAILABLE
from gateway.errors import StoreUnavailable

log = logging.getLogger("harnessrl.gateway")

TAKE = """
WITH v AS (SELECT * FROM unnest(%(ids)s::text[], %(attempts)s::int[], %(counts)s::int[]) AS t(id, attempt, n)),
locked AS MATERIALIZED (SELECT r.id FROM rollouts r JOIN v ON r.id = v.id AND r.attempt = v.attempt
                        WHERE r.calls_closed_at IS NULL
                          AND (r.state = 'running' OR (r.state = 'queued' AND r.attempt = 0))
                        ORDER BY r.id FOR NO KEY UPDATE OF r)
UPDATE rollouts AS r
SET next_seq = GREATEST(r.next_seq, COALESCE((SELECT max(c.seq) + 1 FROM calls c
                                              WHERE c.rollout_id = r.id AND c.attempt = v.attempt), 0)) + v.n
FROM v WHERE r.id = v.id AND r.attempt = v.attempt AND r.id IN (SELECT id FROM locked)
RETURNING r.id, v.attempt, r.next_seq - v.n
"""
"""The first of n numbers for each (rollout, attempt) of a batch; no row for an attempt that is not live (the rule of
`gateway.call_fence.LIVE`: running with its calls not closed, or attempt 0 before any claim)."""
DEADLOCK = "40P01"
MAX_BATCH = 4096


def conninfo(url: str) -> str:
    """A libpq URI of the SQLAlchemy URL `url` (its driver name dropped)."""
    return sa.engine.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class StoreNumbers:
    """Takes call numbers in the store, one statement per batch of requests."""

    def __init__(self, url: str, lock_wait_s: float) -> None:
        self._conninfo = conninfo(url)
        self._options = f"-c synchronous_commit=off -c lock_timeout={max(1, int(lock_wait_s * 1000))}"
        self._conn = None
        self._pending: list[tuple[str, int, asyncio.Future]] = []
        self._running = False

    def take(self, rollout_id: str, attempt: int) -> asyncio.Future:
        """A future of the call's number, or of None when the attempt is over (StoreUnavailable when the store
        cannot give one)."""
        future = asyncio.get_running_loop().create_future()
        self._pending.append((rollout_id, attempt, future))
        if not self._running:
            self._running = True
            asyncio.get_running_loop().create_task(self._drain())
        return future

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                await self._number(batch)
        finally:
            self._running = False

    async def _number(self, batch: list[tuple[str, int, asyncio.Future]]) -> None:
        counts: dict[tuple[str, int], int] = {}
        for rollout_id, attempt, _ in batch:
            counts[(rollout_id, attempt)] = counts.get((rollout_id, attempt), 0) + 1
        params = {"ids": [k[0] for k in counts], "attempts": [k[1] for k in counts], "counts": list(counts.values())}
        try:
            firsts = await self._execute(params)
        except Exception as exc:  # noqa: BLE001 - every waiter learns it, the next batch reconnects
            error = _unavailable(exc)
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(error)
            return
        for rollout_id, attempt, future in batch:
            first = firsts.get((rollout_id, attempt))
            if first is not None:
                firsts[(rollout_id, attempt)] = first + 1
            if not future.done():
                future.set_result(first)

    async def _execute(self, params: dict) -> dict[tuple[str, int], int]:
        import psycopg

        for attempt in range(3):
            if self._conn is None or self._conn.closed:
                self._conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True,
                                                                   options=self._options)
            try:
                cursor = await self._conn.execute(TAKE, params, prepare=True)
                return {(row[0], row[1]): row[2] for row in await cursor.fetchall()}
            except psycopg.errors.DeadlockDetected:
                if attempt == 2:
                    raise
            except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled):
                raise
            except psycopg.OperationalError:  # the connection broke: once more on a new one
                await self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                await conn.close()
            except Exception as exc:  # noqa: BLE001
                log.debug("closing the numbering connection: %s", exc)


def _unavailable(exc: Exception) -> StoreUnavailable:
    busy = getattr(exc, "sqlstate", None) in (POSTGRES_LOCK_NOT_AVAILABLE, DEADLOCK)
    what = "busy" if busy else "unavailable"
    return StoreUnavailable(f"the store is {what} ({exc}); no number was given to the call and nothing was "
                            f"forwarded, retry after {StoreUnavailable.retry_after_s} s")
