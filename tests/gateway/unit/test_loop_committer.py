"""The in-loop committer: writes of one loop iteration share one transaction; a failing one fails alone."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from gateway.committer import GroupCommitter, LoopCommitter, make_committer
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
