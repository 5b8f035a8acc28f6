"""Group commit: every pending write is batched into one transaction on the only write connection.

Each submitted operation runs inside its own savepoint, so a failing operation is rolled back alone while the
rest of the batch commits. Consecutive plain inserts into the same table are sent as one executemany. A caller's
future resolves only after the transaction holding its write has committed: an acknowledged write is durable.

Two committers share that batch logic: `GroupCommitter` runs it on a writer thread (for commits that wait on the
disk or the network: Postgres, SQLite with synchronous=FULL); `LoopCommitter` runs it in the event loop itself,
once per loop iteration (SQLite in WAL with synchronous=NORMAL, whose commits do not wait on the disk), which
saves the thread hand-off and its GIL contention on the proxy's hot path.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa


@dataclass(frozen=True)
class _Insert:
    """A plain row insert, batched with its neighbours."""

    table: sa.Table
    row: dict[str, Any]
    future: Future | asyncio.Future


@dataclass(frozen=True)
class _Op:
    """An arbitrary write operation on the writer's connection."""

    fn: Callable[[sa.Connection], Any]
    future: Future | asyncio.Future


_STOP = object()


class GroupCommitter:
    """Owns the only write connection; `submit`/`insert` return futures resolved after commit."""

    def __init__(self, engine: sa.Engine, *, max_batch: int = 1024) -> None:
        self._engine = engine
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="harnessrl-committer", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[sa.Connection], Any]) -> Future:
        """Run `fn(conn)` in the next transaction; the future holds its return value."""
        future: Future = Future()
        self._queue.put(_Op(fn, future))
        return future

    def insert(self, table: sa.Table, row: dict[str, Any]) -> Future:
        """Insert one row in the next transaction."""
        future: Future = Future()
        self._queue.put(_Insert(table, row, future))
        return future

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
                commit_batch(conn, batch)
                if stop:
                    return

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
    """Commits in the event loop: writes made during one loop iteration share one transaction."""

    def __init__(self, engine: sa.Engine, *, max_batch: int = 1024) -> None:
        self._conn = engine.connect()
        self._conn.info["writer"] = True
        self._max_batch = max_batch
        self._pending: list = []
        self._scheduled = False

    def _enqueue(self, item_type, *args) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._pending.append(item_type(*args, future))
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
        """Commit everything pending now."""
        self._scheduled = False
        batch, self._pending = self._pending, []
        if batch:
            commit_batch(self._conn, batch)

    def close(self) -> None:
        """Commit what is pending and release the connection."""
        self.flush()
        self._conn.close()


def make_committer(engine: sa.Engine, *, commits_wait_on_io: bool) -> GroupCommitter | LoopCommitter:
    """The writer thread when a commit waits on the disk or the network, the in-loop committer otherwise."""
    return GroupCommitter(engine) if commits_wait_on_io else LoopCommitter(engine)


def commit_batch(conn: sa.Connection, batch: list) -> None:
    """Run one batch in one transaction and resolve each item's future (after the commit)."""
    groups = _group_inserts(batch)
    if all(isinstance(group[0], _Insert) for group in groups) and _inserts_only(conn, groups):
        for item in batch:
            _resolve(item.future, None, None)
        return
    results: list[tuple[Future, Any, BaseException | None]] = []
    try:
        with conn.begin():
            for group in groups:
                results.extend(_execute(conn, group))
    except BaseException as exc:  # the commit itself failed: nothing of the batch is durable
        for item in batch:
            _resolve(item.future, None, exc)
        return
    for future, value, error in results:
        _resolve(future, value, error)


def _resolve(future: Future | asyncio.Future, value: Any, error: BaseException | None) -> None:
    """Settle a future unless its waiter already gave up (a cancelled request)."""
    if future.done():
        return
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(error)


def _inserts_only(conn: sa.Connection, groups: list[list]) -> bool:
    """The hot path (only call inserts): one transaction, no savepoints; False (rolled back) if anything failed."""
    try:
        with conn.begin():
            for group in groups:
                conn.execute(group[0].table.insert(), [item.row for item in group])
    except Exception:
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
                conn.execute(group[0].table.insert(), [item.row for item in group])
                return [(item.future, None, None) for item in group]
            return [(group[0].future, group[0].fn(conn), None)]
    except Exception as exc:
        if len(group) == 1:
            return [(group[0].future, None, exc)]
    return [result for item in group for result in _execute(conn, [item])]
