"""Group commit: one writer thread batches every pending write into one transaction.

Each submitted operation runs inside its own savepoint, so a failing operation is rolled back alone while the
rest of the batch commits. Consecutive plain inserts into the same table are sent as one executemany. A caller's
future resolves only after the transaction holding its write has committed: an acknowledged write is durable.
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
    future: Future


@dataclass(frozen=True)
class _Op:
    """An arbitrary write operation on the writer's connection."""

    fn: Callable[[sa.Connection], Any]
    future: Future


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
                self._commit_batch(conn, batch)
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

    def _commit_batch(self, conn: sa.Connection, batch: list) -> None:
        groups = _group_inserts(batch)
        if all(isinstance(group[0], _Insert) for group in groups) and _inserts_only(conn, groups):
            for item in batch:
                item.future.set_result(None)
            return
        results: list[tuple[Future, Any, BaseException | None]] = []
        try:
            with conn.begin():
                for group in groups:
                    results.extend(_execute(conn, group))
        except BaseException as exc:  # the commit itself failed: nothing of the batch is durable
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(exc)
            return
        for future, value, error in results:
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
