"""A stopping gateway answers its finished-feed long-polls at once (`SqlStore.stop_waiting`, `gateway.server`)."""

from __future__ import annotations

import asyncio
import time

from gateway.store import SqlStore


def test_stop_waiting_answers_a_long_poll_in_flight_and_later_ones_at_once(tmp_path) -> None:
    async def main() -> None:
        store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
        try:
            started = time.monotonic()
            poll = asyncio.create_task(store.list_finished(0, 10, 60.0))
            await asyncio.sleep(0.2)
            assert not poll.done()  # it waits: nothing has finished
            store.stop_waiting()
            page = await asyncio.wait_for(poll, timeout=30)
            assert page.rollouts == [] and time.monotonic() - started < 30  # the page as it stands, not 60 s later
            late = time.monotonic()
            assert (await store.list_finished(0, 10, 60.0)).rollouts == []
            assert time.monotonic() - late < 30
        finally:
            store.close()

    asyncio.run(main())
