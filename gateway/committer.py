"""Group commit: every pending write is batched into one transaction on the only write connection.

Each submitted operation runs inside its own savepoint, so a failing operation is rolled back alone while the
rest of the batch commits. Consecutive plain inserts into the same table are sent as one executemany. A caller's
future resolves only after the transaction holding its write has committed: an acknowledged write is durable.

Two committers share that batch logic: `GroupCommitter` runs it on a writer thread (for commits that wait on the
disk or the network: Postgres, SQLite with synchronous=FULL); `LoopCommitter` runs it in the event loop itself,
once per loop iteration (SQLite in WAL with synchronous=NORMAL, whose commits do not wait on the disk), which
saves the thread hand-off and its GIL contention on the proxy's hot path.

Neither lets a caller, nor the event loop, wait on a locked or busy database: every write carries a deadline
(`lock_wait_s` after it was submitted). The writer thread waits for SQLite's lock at most until the earliest deadline of
its batch, and fails what is past its deadline with `StoreBusy` without trying. The in-loop committer never waits at
all: its connection does not wait for the lock (busy timeout 0); when the lock is taken it hands the batch, and
everything after it until the hand-off has drained (order is kept), to a writer thread of its own.
"""

from __future__ import annotations

import asyncio
import math
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from gateway.sql import insert_rows, insert_rows_sqlite


class StoreBusy(Exception):
    """The database stayed locked (or busy) past the write's deadline; nothing of the write was committed."""


@dataclass(frozen=True)
class _Insert:
    """A plain row insert, batched with its neighbours."""

    table: sa.Table  # the table inserted into
    row: dict[str, Any]  # the row's values
    future: Future | asyncio.Future  # resolved after the commit
    deadline_s: float = math.inf  # monotonic time after which the write fails with StoreBusy instead of waiting


@dataclass(frozen=True)
class _Op:
    """An arbitrary write operation on the writer's connection."""

    fn: Callable[[sa.Connection], Any]  # run inside the batch's transaction, in its own savepoint
    future: Future | asyncio.Future  # holds fn's value after the commit
    deadline_s: float = math.inf  # monotonic time after which the write fails with StoreBusy instead of waiting


_STOP = object()
BUSY_MESSAGES = ("database is locked", "database is busy", "database table is locked")


POSTGRES_LOCK_NOT_AVAILABLE = "55P03"
"""PostgreSQL's SQLSTATE for a statement cancelled by lock_timeout."""
PG_RESET_MS = 50
"""PostgreSQL's lock_timeout is set again only when the wait left changes by more than this."""


def is_busy(exc: BaseException) -> bool:
    """Whether `exc` is 'the lock is held by another connection' (retrying later may succeed): SQLite's busy error
    or PostgreSQL's lock timeout."""
    if not isinstance(exc, sa.exc.OperationalError):
        return False
    return (any(m in str(exc.orig) for m in BUSY_MESSAGES)
            or getattr(exc.orig, "sqlstate", None) == POSTGRES_LOCK_NOT_AVAILABLE)


def _set_busy_timeout(conn: sa.Connection, wait_s: float) -> None:
    """The lock wait of this connection, set on the driver's connection (no transaction is left open): SQLite's
    busy timeout, PostgreSQL's lock_timeout (at least 1 ms: 0 would mean no limit)."""
    wait_ms = max(0, int(wait_s * 1000))
    if conn.dialect.name == "sqlite":
        conn.connection.driver_connection.execute(f"PRAGMA busy_timeout={wait_ms}")
    elif conn.dialect.name == "postgresql" and abs(wait_ms - conn.info.get("lock_timeout_ms", -1)) > PG_RESET_MS:
        driver = conn.connection.driver_connection  # two round trips: skipped while the wait is about the same
        driver.execute(f"SET lock_timeout = {max(1, wait_ms)}")
        driver.commit()
        conn.info["lock_timeout_ms"] = wait_ms


class GroupCommitter:
    """Owns the only write connection; `submit`/`insert` return futures resolved after commit."""

    def __init__(self, engine: sa.Engine, *, max_batch: int = 1024, lock_wait_s: float = math.inf) -> None:
        self._engine = engine
        self._max_batch = max_batch
        self._lock_wait_s = lock_wait_s
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._unsettled = 0  # items queued or committing: counted by this committer, not by their waiters
        self._count_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="harnessrl-committer", daemon=True)
        self._thread.start()

    @property
    def idle(self) -> bool:
        """Whether everything put on the queue has committed (or failed): nothing of it can land after a write
        committed elsewhere now. A cancelled waiter does not change it (its write is still committed)."""
        return self._unsettled == 0

    def _put(self, item: _Insert | _Op) -> None:
        with self._count_lock:
            self._unsettled += 1
        self._queue.put(item)

    def submit(self, fn: Callable[[sa.Connection], Any]) -> Future:
        """Run `fn(conn)` in the next transaction; the future holds its return value."""
        future: Future = Future()
        self._put(_Op(fn, future, time.monotonic() + self._lock_wait_s))
        return future

    def insert(self, table: sa.Table, row: dict[str, Any]) -> Future:
        """Insert one row in the next transaction."""
        future: Future = Future()
        self._put(_Insert(table, row, future, time.monotonic() + self._lock_wait_s))
        return future

    def put_items(self, batch: list) -> None:
        """Take over already-built items (the in-loop committer's hand-off); their deadlines are kept."""
        for item in batch:
            self._put(item)

    async def run(self, fn: Callable[[sa.Connection], Any]) -> Any:
        """Await `submit(fn)` from an event loop."""
        return await asyncio.wrap_future(self.submit(fn))

    async def run_insert(self, table: sa.Table, row: dict[str, Any]) -> None:
        """Await `insert(table, row)` from an event loop."""
        await asyncio.wrap_future(self.insert(table, row))

    def close(self) -> None:
        """Commit what is pending and stop the thread."""
        self._queue.put(_STOP)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        with self._engine.connect() as conn:
            conn.info["writer"] = True  # BEGIN IMMEDIATE on SQLite: take the write lock up front
            while True:
                first = self._queue.get()
                if first is _STOP:
                    return
                batch = [first]
                stop = self._drain_into(batch)
                self._commit_within_deadlines(conn, batch)
                if stop:
                    return

    def _ended(self, count: int) -> None:
        """`count` items are committed or failed: called before their futures resolve, so that a waiter woken by
        one already sees the committer idle."""
        with self._count_lock:
            self._unsettled -= count

    def _commit_within_deadlines(self, conn: sa.Connection, batch: list) -> None:
        """Fail what is past its deadline; wait for the lock no longer than the earliest deadline left."""
        now = time.monotonic()
        live = [item for item in batch if item.deadline_s > now]
        self._ended(len(batch) - len(live))
        for item in batch:
            if item.deadline_s <= now:
                _resolve(item.future, None, StoreBusy(f"the database stayed locked for longer than the write's "
                                                      f"{self._lock_wait_s} s budget"))
        if live:
            earliest = min(item.deadline_s for item in live)
            if earliest != math.inf:
                _set_busy_timeout(conn, earliest - now)
            commit_batch(conn, live, ended=lambda: self._ended(len(live)))  # once: no on_busy here

    def _drain_into(self, batch: list) -> bool:
        while len(batch) < self._max_batch:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return False
            if item is _STOP:
                return True
            batch.append(item)
        return False


class LoopCommitter:
    """Commits in the event loop: writes made during one loop iteration share one transaction. While what was handed
    to the writer thread (the lock was taken) has not all committed, later batches follow it there: order is kept."""

    def __init__(self, engine: sa.Engine, *, max_batch: int = 1024, lock_wait_s: float = math.inf) -> None:
        self._engine = engine
        self._conn = engine.connect()
        self._conn.info["writer"] = True
        _set_busy_timeout(self._conn, 0)  # never wait for the lock on the event loop
        self._max_batch = max_batch
        self._lock_wait_s = lock_wait_s
        self._pending: list = []
        self._scheduled = False
        self._fallback: GroupCommitter | None = None  # where batches go while the lock is taken

    def _enqueue(self, item_type, *args) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._pending.append(item_type(*args, future, time.monotonic() + self._lock_wait_s))
        if len(self._pending) >= self._max_batch:
            self.flush()
        elif not self._scheduled:
            self._scheduled = True
            loop.call_soon(self.flush)
        return future

    async def run(self, fn: Callable[[sa.Connection], Any]) -> Any:
        """Run `fn(conn)` in this iteration's transaction; returns its value once committed."""
        return await self._enqueue(_Op, fn)

    async def run_insert(self, table: sa.Table, row: dict[str, Any]) -> None:
        """Insert one row in this iteration's transaction; returns once committed."""
        await self._enqueue(_Insert, table, row)

    def flush(self) -> None:
        """Commit everything pending now (or hand it to the writer thread while the lock is taken)."""
        self._scheduled = False
        batch, self._pending = self._pending, []
        if not batch:
            return
        if self._fallback is not None and not self._fallback.idle:  # counted by the committer: a cancelled
            self._hand_off(batch)  # waiter's write is still committed, and nothing may overtake it
        else:
            commit_batch(self._conn, batch, on_busy=self._hand_off)

    def _hand_off(self, batch: list) -> None:
        if self._fallback is None:
            self._fallback = GroupCommitter(self._engine, lock_wait_s=self._lock_wait_s)
        self._fallback.put_items(batch)

    def close(self) -> None:
        """Commit what is pending and release the connection."""
        self.flush()
        if self._fallback is not None:
            self._fallback.close()
        self._conn.close()


def make_committer(engine: sa.Engine, *, commits_wait_on_io: bool,
                   lock_wait_s: float = math.inf) -> GroupCommitter | LoopCommitter:
    """The writer thread when a commit waits on the disk or the network, the in-loop committer otherwise."""
    kind = GroupCommitter if commits_wait_on_io else LoopCommitter
    return kind(engine, lock_wait_s=lock_wait_s)


def _nothing() -> None:
    return None


def commit_batch(conn: sa.Connection, batch: list, *, on_busy: Callable[[list], None] | None = None,
                 ended: Callable[[], None] = _nothing) -> None:
    """Run one batch in one transaction and resolve each item's future (after the commit). With `on_busy`, a batch
    whose transaction could not take the lock is passed to it untouched instead of being failed. `ended` is called
    once the transaction has committed or rolled back, before any future resolves."""
    groups = _group_inserts(batch)
    try:
        if all(isinstance(group[0], _Insert) for group in groups) and _inserts_only(conn, groups):
            ended()
            for item in batch:
                _resolve(item.future, None, None)
            return
        results: list[tuple[Future, Any, BaseException | None]] = []
        with conn.begin():
            for group in groups:
                results.extend(_execute(conn, group))
    except BaseException as exc:  # the transaction failed: nothing of the batch is durable
        if on_busy is not None and is_busy(exc):
            on_busy(batch)
            return
        ended()
        for item in batch:
            _resolve(item.future, None, exc)
        return
    ended()
    for future, value, error in results:
        _resolve(future, value, error)


def _resolve(future: Future | asyncio.Future, value: Any, error: BaseException | None) -> None:
    """Settle a future unless its waiter already gave up (a cancelled request); an event loop's future is settled
    in its loop's thread."""
    if isinstance(future, asyncio.Future):
        loop = future.get_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not loop:
            loop.call_soon_threadsafe(_settle, future, value, error)
            return
    _settle(future, value, error)


def _settle(future: Future | asyncio.Future, value: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(error)


def _inserts_only(conn: sa.Connection, groups: list[list]) -> bool:
    """The hot path (only call inserts): one transaction, no savepoints; False (rolled back) if a row failed.
    A busy lock is raised: retrying row by row would meet it again. On SQLite straight through the driver
    (`sql.insert_rows_sqlite`)."""
    try:
        if conn.dialect.name == "sqlite":
            insert_rows_sqlite(conn, [(group[0].table, [item.row for item in group]) for group in groups])
            return True
        with conn.begin():
            for group in groups:
                insert_rows(conn, group[0].table, [item.row for item in group])
    except Exception as exc:
        if is_busy(exc):
            raise
        return False
    return True


def _group_inserts(batch: list) -> list[list]:
    """Split the batch into runs: consecutive inserts into one table form one run, each op its own."""
    groups: list[list] = []
    for item in batch:
        last = groups[-1] if groups else None
        if (isinstance(item, _Insert) and last and isinstance(last[0], _Insert)
                and last[0].table is item.table and last[0].row.keys() == item.row.keys()):
            last.append(item)
        else:
            groups.append([item])
    return groups


def _execute(conn: sa.Connection, group: list) -> list[tuple[Future, Any, BaseException | None]]:
    """Run one group inside a savepoint; on failure retry its items one by one so only the culprit fails."""
    try:
        with conn.begin_nested():
            if isinstance(group[0], _Insert):
                insert_rows(conn, group[0].table, [item.row for item in group])
                return [(item.future, None, None) for item in group]
            return [(group[0].future, group[0].fn(conn), None)]
    except Exception as exc:
        if len(group) == 1:
            return [(group[0].future, None, exc)]
    return [result for item in group for result in _execute(conn, [item])]
