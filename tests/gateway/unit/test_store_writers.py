"""The store works the same with either committer: in-loop (SQLite NORMAL) and writer thread (SQLite FULL)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.committer import GroupCommitter, LoopCommitter
from gateway.errors import InvalidTransition
from gateway.records import RolloutPatch, RolloutSpec, RolloutState
from gateway.store import SqlStore


@pytest.mark.parametrize(("synchronous", "committer"), [("NORMAL", LoopCommitter), ("FULL", GroupCommitter)])
def test_rollout_lifecycle_on_both_committers(tmp_path, synchronous, committer) -> None:
    async def main() -> None:
        store = SqlStore(f"sqlite:///{tmp_path / 's.db'}", sqlite_synchronous=synchronous)
        assert isinstance(store._committer, committer)
        try:
            [(created, fresh)] = await store.create_rollouts([RolloutSpec(id="r", group_id="g")])
            assert fresh and created.state == RolloutState.QUEUED
            [claimed] = await store.claim("c", 1, 30.0)
            assert claimed.attempt == 1
            done = await store.transition("r", RolloutPatch(state=RolloutState.SUCCEEDED))
            assert done.finished_seq == 1
            with pytest.raises(InvalidTransition):
                await store.transition("r", RolloutPatch(state=RolloutState.RUNNING))
            page = await store.list_finished(0, 10, 0.0)
            assert [r.id for r in page.rollouts] == ["r"]
        finally:
            store.close()

    asyncio.run(main())
