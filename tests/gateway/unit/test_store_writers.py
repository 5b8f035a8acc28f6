"""The store works the same on every commit path: in the loop (SQLite NORMAL; FULL with one call in flight) and on
the writer thread (FULL with several)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.committer import CommitWait, LoopCommitter
from gateway.config import GatewayConfig
from gateway.context import open_context
from gateway.errors import InvalidTransition
from gateway.records import RolloutPatch, RolloutSpec, RolloutState
from gateway.store import SqlStore


@pytest.mark.parametrize(("synchronous", "in_loop", "committer", "waits_on"), [
    ("NORMAL", None, LoopCommitter, CommitWait.NOTHING),
    ("FULL", True, LoopCommitter, CommitWait.DISK),  # one call in flight: committed in the loop
    ("FULL", False, LoopCommitter, CommitWait.DISK),  # several: every commit handed to the writer thread
    ("EXTRA", None, LoopCommitter, CommitWait.DISK),  # no predicate given: on the writer thread
])
def test_rollout_lifecycle_on_every_commit_path(tmp_path, synchronous, in_loop, committer, waits_on) -> None:
    async def main() -> None:
        store = SqlStore(f"sqlite:///{tmp_path / 's.db'}", sqlite_synchronous=synchronous)
        assert isinstance(store._committer, committer) and store.commit_waits_on == waits_on
        if in_loop is not None:
            store.commit_in_loop_while(lambda: in_loop)
        on_thread = waits_on == CommitWait.DISK and not in_loop
        assert store._committer.in_loop_while() is not on_thread
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
            assert (store._committer._fallback is not None) is on_thread, "the thread starts only when handed a batch"
        finally:
            store.close()

    asyncio.run(main())


def test_the_predicate_is_taken_only_where_a_commit_waits_on_the_disk(tmp_path) -> None:
    async def main() -> None:
        normal = SqlStore(f"sqlite:///{tmp_path / 'n.db'}", sqlite_synchronous="NORMAL")
        normal.commit_in_loop_while(lambda: False)
        assert normal._committer.in_loop_while(), "a commit that waits on nothing always runs in the loop"
        normal.close()

    asyncio.run(main())


def test_the_gateway_commits_in_the_loop_only_while_one_call_is_in_flight(tmp_path) -> None:
    """FULL: the flush blocks the loop, so the gateway allows it only while no other call could wait behind it."""
    async def main() -> list[bool]:
        context = await open_context(GatewayConfig(db_url=f"sqlite:///{tmp_path / 's.db'}", admin_token="x",
                                                   sqlite_synchronous="FULL"))
        seen = []
        try:
            for in_flight in (0, 1, 2, 17):
                context.gate.in_flight = in_flight
                seen.append(context.store._committer.in_loop_while())
        finally:
            context.gate.in_flight = 0
            await context.close()
        return seen

    assert asyncio.run(main()) == [True, True, False, False]
