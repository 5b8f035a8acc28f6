"""The in-loop committer: writes of one loop iteration share one transaction; a failing one fails alone; a locked
database never blocks the loop and fails a write past its deadline."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time

import pytest
import sqlalchemy as sa

from gateway.committer import GroupCommitter, LoopCommitter, StoreBusy, is_busy, make_committer
from tests.gateway.unit.test_committer import engine, insert_then_fail, items, stored  # noqa: F401


def test_one_iteration_is_one_batch_and_a_failing_op_fails_alone(engine) -> None:  # noqa: F811
    committer = LoopCommitter(engine)

    async def main():
        return await asyncio.gather(
            committer.run(lambda conn: conn.execute(items.insert().values(id=1, v="a")).rowcount),
            committer.run(insert_then_fail),
            committer.run_insert(items, {"id": 2, "v": "b"}),
            return_exceptions=True)

    ok, failed, inserted = asyncio.run(main())
    committer.close()
    assert ok == 1 and inserted is None
    assert isinstance(failed, ValueError)
    assert stored(engine) == {1: "a", 2: "b"}


def test_a_bad_row_among_inserts_fails_alone(engine) -> None:  # noqa: F811
    committer = LoopCommitter(engine)

    async def main():
        await committer.run_insert(items, {"id": 7, "v": "first"})
        return await asyncio.gather(*(committer.run_insert(items, {"id": i, "v": f"r{i}"}) for i in (10, 7, 11)),
                                    return_exceptions=True)

    results = asyncio.run(main())
    committer.close()
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], sa.exc.IntegrityError)
    assert stored(engine) == {7: "first", 10: "r10", 11: "r11"}


def test_a_cancelled_waiter_does_not_break_the_batch(engine) -> None:  # noqa: F811
    committer = LoopCommitter(engine)

    async def main():
        doomed = asyncio.ensure_future(committer.run_insert(items, {"id": 1, "v": "x"}))
        kept = asyncio.ensure_future(committer.run_insert(items, {"id": 2, "v": "y"}))
        await asyncio.sleep(0)
        doomed.cancel()
        await kept

    asyncio.run(main())
    committer.close()
    assert stored(engine) == {1: "x", 2: "y"}


@pytest.mark.parametrize(("waits", "expected"), [(True, GroupCommitter), (False, LoopCommitter)])
def test_the_committer_follows_whether_commits_wait_on_io(engine, waits, expected) -> None:  # noqa: F811
    committer = make_committer(engine, commits_wait_on_io=waits)
    assert isinstance(committer, expected)
    committer.close()


class _HeldLock:
    """Another connection takes SQLite's write lock now and releases it after `release_after_s`, or at `release()`
    (a test done with the lock does not wait out its time)."""

    def __init__(self, db: sa.Engine, release_after_s: float) -> None:
        self._holder = sqlite3.connect(db.url.database, isolation_level=None, check_same_thread=False)
        self._holder.execute("BEGIN IMMEDIATE")
        self._once = threading.Lock()
        self._timer = threading.Timer(release_after_s, self.release)
        self._timer.start()

    def release(self) -> None:
        self._timer.cancel()
        if self._once.acquire(blocking=False):
            self._holder.rollback()
            self._holder.close()


async def _ticks_while(awaitable) -> tuple[object, int, float]:
    """(the awaitable's results, how often a 10 ms ticker ran meanwhile, seconds taken)."""
    ticks, done = 0, False

    async def ticker() -> None:
        nonlocal ticks
        while not done:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.ensure_future(ticker())
    started = time.monotonic()
    result = await awaitable
    done = True
    await task
    return result, ticks, time.monotonic() - started


def test_a_locked_database_never_blocks_the_loop_and_order_is_kept(engine) -> None:  # noqa: F811
    committer = LoopCommitter(engine, lock_wait_s=2.0)
    _HeldLock(engine, 0.4)

    async def main():
        first = asyncio.ensure_future(committer.run_insert(items, {"id": 1, "v": "first"}))
        await asyncio.sleep(0.05)  # handed off by now; what follows must queue behind it
        later = committer.run(lambda conn: conn.execute(items.update().values(v="second")).rowcount)
        return await _ticks_while(asyncio.gather(first, later))

    (inserted, updated), ticks, seconds = asyncio.run(main())
    committer.close()
    assert (inserted, updated, stored(engine)) == (None, 1, {1: "second"})
    assert 0.3 < seconds < 1.5 and ticks > 20  # the loop kept running while the lock was held


@pytest.mark.parametrize("cancel_the_first_waiter", [False, True])
def test_a_batch_never_overtakes_one_still_on_the_thread(engine, cancel_the_first_waiter) -> None:  # noqa: F811
    """The first write finds the lock taken and goes to the thread, which waits for it; the lock then goes: the
    second write must still commit after the first (the loop would win the race: the thread's busy handler is
    asleep), whether or not the first's waiter was cancelled meanwhile (its write is committed all the same)."""
    committer = LoopCommitter(engine, lock_wait_s=5.0)
    held = _HeldLock(engine, 5.0)

    async def main():
        first = asyncio.ensure_future(committer.run_insert(items, {"id": 1, "v": "first"}))
        await asyncio.sleep(0.05)  # handed to the thread, waiting for the lock
        if cancel_the_first_waiter:
            first.cancel()
            await asyncio.sleep(0)
        held.release()
        second = await committer.run(lambda conn: (conn.execute(items.update().values(v="second")).rowcount,
                                                   threading.current_thread().name))
        await asyncio.gather(first, return_exceptions=True)
        return second

    updated, where = asyncio.run(main())
    committer.close()
    assert (updated, where, stored(engine)) == (1, "harnessrl-committer", {1: "second"})


@pytest.mark.parametrize("kind", [LoopCommitter, GroupCommitter])
def test_a_lock_held_past_the_deadline_fails_the_write_in_time(engine, kind) -> None:  # noqa: F811
    committer = kind(engine, lock_wait_s=0.5)
    held = _HeldLock(engine, 1.2)

    async def main():
        return await _ticks_while(asyncio.gather(committer.run_insert(items, {"id": 1, "v": "x"}),
                                                 return_exceptions=True))

    (error,), ticks, seconds = asyncio.run(main())
    held.release()  # held past the deadline: the write has failed
    committer.close()
    assert is_busy(error) or isinstance(error, StoreBusy), error
    assert 0.4 < seconds < 1.0 and ticks > 20 and stored(engine) == {}
