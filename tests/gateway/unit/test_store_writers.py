"""The store works the same on every commit path: in the loop (SQLite NORMAL; on FULL, the small record of the one
call in flight) and on the writer thread (everything else on FULL)."""

from __future__ import annotations

import asyncio

import pytest

from gateway import schema
from gateway.committer import CommitWait, LoopCommitter, _Insert
from gateway.config import GatewayConfig
from gateway.context import open_context
from gateway.errors import InvalidTransition
from gateway.records import RolloutPatch, RolloutSpec, RolloutState
from gateway.store import IN_LOOP_MAX_BYTES, SqlStore


@pytest.mark.parametrize(("synchronous", "alone", "waits_on"), [
    ("NORMAL", None, CommitWait.NOTHING),
    ("FULL", True, CommitWait.DISK),  # one call in flight: its record would commit in the loop, the rest on the thread
    ("FULL", False, CommitWait.DISK),  # several: every commit on the writer thread
    ("EXTRA", None, CommitWait.DISK),  # no predicate given: on the writer thread
])
def test_rollout_lifecycle_on_every_commit_path(tmp_path, synchronous, alone, waits_on) -> None:
    async def main() -> None:
        store = SqlStore(f"sqlite:///{tmp_path / 's.db'}", sqlite_synchronous=synchronous)
        assert isinstance(store._committer, LoopCommitter) and store.commit_waits_on == waits_on
        if alone is not None:
            store.commit_in_loop_while(lambda: alone)
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
            on_thread = waits_on == CommitWait.DISK
            assert (store._committer._fallback is not None) is on_thread, "control-plane writes: thread iff FULL"
        finally:
            store.close()

    asyncio.run(main())


def _call_record(size: int) -> list:
    return [_Insert(schema.calls, {"rollout_id": "r", "request_raw": b"x" * size}, None)]


@pytest.mark.parametrize(("synchronous", "alone", "batch", "in_loop"), [
    ("FULL", True, _call_record(100), True),
    ("FULL", False, _call_record(100), False),  # another call in flight
    ("FULL", True, _call_record(IN_LOOP_MAX_BYTES + 1), False),  # a big record's flush would hold up the loop
    ("FULL", True, _call_record(100) * 2, False),
    ("FULL", True, [_Insert(schema.events, {"rollout_id": "r"}, None)], False),  # not a call's record
    ("NORMAL", False, [_Insert(schema.events, {"rollout_id": "r"}, None)], True),  # NORMAL: always in the loop
])
def test_only_the_record_of_the_one_call_in_flight_commits_in_the_loop_on_full(tmp_path, synchronous, alone, batch,
                                                                              in_loop) -> None:
    async def main() -> bool:
        store = SqlStore(f"sqlite:///{tmp_path / 's.db'}", sqlite_synchronous=synchronous)
        store.commit_in_loop_while(lambda: alone)
        try:
            return store._committer.in_loop(batch)
        finally:
            store.close()

    assert asyncio.run(main()) is in_loop


def test_the_gateway_counts_the_calls_in_flight_for_the_store(tmp_path) -> None:
    async def main() -> list[bool]:
        context = await open_context(GatewayConfig(db_url=f"sqlite:///{tmp_path / 's.db'}", admin_token="x",
                                                   sqlite_synchronous="FULL"))
        seen = []
        try:
            for in_flight in (0, 1, 2, 17):
                context.gate.in_flight = in_flight
                seen.append(context.store._committer.in_loop(_call_record(100)))
        finally:
            context.gate.in_flight = 0
            await context.close()
        return seen

    assert asyncio.run(main()) == [True, True, False, False]
