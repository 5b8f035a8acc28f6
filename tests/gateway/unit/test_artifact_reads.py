"""The harnesses' artifact reads in flight (gateway/artifact_reads.py): one a rollout, bounded bytes in all, a
bounded wait, and nothing left counted."""

from __future__ import annotations

import asyncio

import pytest

from gateway.artifact_reads import ArtifactReads, ArtifactReadsBusy


def _reader(reads: ArtifactReads, rollout_id: str, size: int, release: asyncio.Event, log: list[str]):
    async def read() -> None:
        async with reads.reading(rollout_id) as held:
            log.append(f"start {rollout_id}")
            held.loaded(size)
            await release.wait()
        log.append(f"end {rollout_id}")
    return asyncio.ensure_future(read())


def test_a_rollout_reads_one_artifact_at_a_time():
    async def scenario():
        reads, log, first_done, second_done = ArtifactReads(1000, 10), [], asyncio.Event(), asyncio.Event()
        first = _reader(reads, "r1", 5, first_done, log)
        second = _reader(reads, "r1", 5, second_done, log)
        other = _reader(reads, "r2", 5, second_done, log)
        await asyncio.sleep(0.01)
        assert log == ["start r1", "start r2"], "the rollout's second read waits; another rollout's does not"
        first_done.set()
        await asyncio.sleep(0.01)
        assert log[2:] == ["end r1", "start r1"]
        second_done.set()
        await asyncio.gather(first, second, other)
        return reads

    reads = asyncio.run(scenario())
    assert (reads.in_flight_bytes, reads.rollouts) == (0, set())


def test_reads_hold_the_worst_case_until_loaded_then_their_size_and_wait_for_room():
    async def scenario():
        reads, log = ArtifactReads(max_bytes=100, reserve_bytes=40), []
        gates = {name: asyncio.Event() for name in ("a", "b", "c")}
        holders = []
        for name in ("a", "b"):
            async def hold(name=name):
                async with reads.reading(name):
                    log.append(f"start {name}")
                    await gates[name].wait()
            holders.append(asyncio.ensure_future(hold()))
        await asyncio.sleep(0.01)
        assert reads.in_flight_bytes == 80 and log == ["start a", "start b"]
        third = _reader(reads, "c", 5, gates["c"], log)
        await asyncio.sleep(0.01)
        assert log == ["start a", "start b"], "80 + a worst case of 40 is past 100: c waits"
        gates["a"].set()
        await asyncio.sleep(0.01)
        assert log[-1] == "start c" and reads.in_flight_bytes == 45, "c started and holds its size, 5"
        gates["b"].set()
        gates["c"].set()
        await asyncio.gather(*holders, third)
        return reads

    reads = asyncio.run(scenario())
    assert (reads.in_flight_bytes, reads.rollouts) == (0, set())


def test_a_read_that_cannot_start_in_time_is_503_with_retry_after_and_counts_nothing():
    async def scenario():
        reads, log, gate = ArtifactReads(1000, 10, wait_s=0.05), [], asyncio.Event()
        holder = _reader(reads, "r1", 5, gate, log)
        await asyncio.sleep(0.01)
        with pytest.raises(ArtifactReadsBusy) as busy:
            async with reads.reading("r1"):
                pytest.fail("admitted beside the rollout's read in flight")
        gate.set()
        await holder
        return reads, busy.value

    reads, error = asyncio.run(scenario())
    assert error.status == 503 and error.code == "artifact_reads_busy" and error.headers() == {"retry-after": "1"}
    assert "artifact_read_bytes_in_flight" in error.message
    assert (reads.in_flight_bytes, reads.rollouts, reads._waiters) == (0, set(), [])


def test_an_artifact_larger_than_the_budget_is_read_alone_and_a_failed_read_frees_its_place():
    async def scenario():
        reads = ArtifactReads(max_bytes=10, reserve_bytes=50)
        async with reads.reading("r1") as read:
            read.loaded(70)
            assert reads.in_flight_bytes == 70
        with pytest.raises(RuntimeError):
            async with reads.reading("r1"):
                raise RuntimeError("the store failed")
        async with reads.reading("r1"):
            pass
        return reads

    reads = asyncio.run(scenario())
    assert (reads.in_flight_bytes, reads.rollouts) == (0, set())


def test_a_read_of_a_known_size_reserves_that_size_not_the_largest_an_artifact_may_weigh():
    """Reads of small artifacts were admitted as if each weighed max_body_bytes: a few filled the bytes in flight."""
    async def scenario():
        reads, release, log = ArtifactReads(100, 60), asyncio.Event(), []

        async def read(rollout_id: str, size: int) -> None:
            async with reads.reading(rollout_id, size):
                log.append(rollout_id)
                await release.wait()

        tasks = [asyncio.ensure_future(read(f"r{i}", 20)) for i in range(5)]
        await asyncio.sleep(0.01)
        started, held = list(log), reads.in_flight_bytes
        release.set()
        await asyncio.gather(*tasks)
        return started, held, reads.in_flight_bytes

    started, held, left = asyncio.run(scenario())
    assert started == [f"r{i}" for i in range(5)] and held == 100 and left == 0  # five of 20 in 100; one of 60 alone
