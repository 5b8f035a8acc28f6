"""The store on a real PostgreSQL server, where it differs from SQLite: the URL's default driver, several gateways
writing one database (a multi-node deployment), and a lock held by another session. The store's contract itself runs
on PostgreSQL through the parametrized gateway fixture (tests/gateway/conftest.py)."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import sqlalchemy as sa

from gateway.client import GatewayClient
from gateway.records import EventKind, RolloutPatch, RolloutSpec, RolloutState
from gateway.scripted import Script
from gateway.sql import make_engine, with_default_driver
from gateway.store import SqlStore
from tests.gateway.api_support import chat, create_rollouts, error_of
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway, InProcessScripted

pytestmark = pytest.mark.slow  # a PostgreSQL server process

GATEWAYS = 2
ROLLOUTS = 40


def connect(url: str):
    """A psycopg connection to the SQLAlchemy URL `url` (imported here: collection is paid by every worker, and this
    module is in the slow tier)."""
    import psycopg

    return psycopg.connect(url.replace("+psycopg", ""))


@pytest.mark.parametrize(("url", "expected"), [
    ("postgresql://u@h/db", "postgresql+psycopg://u@h/db"),
    ("postgres://u@h/db", "postgresql+psycopg://u@h/db"),
    ("postgresql+psycopg2://u@h/db", "postgresql+psycopg2://u@h/db"),
    ("sqlite:///x.db", "sqlite:///x.db"),
])
def test_a_postgresql_url_without_a_driver_gets_psycopg(url, expected) -> None:
    assert with_default_driver(url) == expected


def test_the_store_opens_a_driverless_postgresql_url(postgres_server) -> None:
    url = postgres_server.create_database("driverless").replace("postgresql+psycopg://", "postgresql://")

    async def main() -> RolloutState:
        store = SqlStore(url)
        try:
            await store.create_rollouts([RolloutSpec(id="r", group_id="g")])
            return (await store.get_rollout("r")).state
        finally:
            store.close()

    assert asyncio.run(main()) == RolloutState.QUEUED


@pytest.fixture
def shared_stores(postgres_server):
    """Runs `fn(stores)` against GATEWAYS stores on one new database (as several gateway processes would be: no
    rollout cache), with ROLLOUTS queued rollouts; `run.url` is the database's URL. The bursts of 40 writes at once
    are about correctness, not latency: a write may wait 30 s (not the default 1 s) on a loaded machine."""
    url = postgres_server.create_database("shared")

    def run(fn):
        async def main():
            stores = [SqlStore(url, cache_rollouts=False, lock_wait_s=30.0) for _ in range(GATEWAYS)]
            try:
                await stores[0].create_rollouts([RolloutSpec(id=f"r{i}", group_id="g") for i in range(ROLLOUTS)])
                return await fn(stores)
            finally:
                for store in stores:
                    store.close()
        return asyncio.run(main())
    run.url = url
    return run


async def claim_all(stores: list[SqlStore], lease_s: float) -> list[str]:
    """Every gateway claims at once, three at a time, as many times as there are rollouts: the ids claimed."""
    claims = await asyncio.gather(*(stores[i % GATEWAYS].claim(f"c{i}", 3, lease_s) for i in range(ROLLOUTS)))
    return [r.id for batch in claims for r in batch]


def test_gateways_sharing_one_database_never_claim_a_rollout_twice(shared_stores) -> None:
    claimed = shared_stores(lambda stores: claim_all(stores, 60.0))
    assert sorted(claimed) == sorted(f"r{i}" for i in range(ROLLOUTS)), "each rollout claimed exactly once"


def test_gateways_sharing_one_database_requeue_an_expired_lease_once(shared_stores) -> None:
    async def expire_then_reclaim(stores: list[SqlStore]) -> tuple[list[str], list[list[str]]]:
        await claim_all(stores, 60.0)
        with connect(shared_stores.url) as conn:
            conn.execute("UPDATE rollouts SET lease_expires_at = 0")  # every lease lost
        reclaimed = await claim_all(stores, 60.0)
        states = [[e.payload["state"] for e in await stores[0].list_events(f"r{i}") if e.kind == EventKind.STATE]
                  for i in range(ROLLOUTS)]
        return reclaimed, states

    reclaimed, states = shared_stores(expire_then_reclaim)
    assert sorted(reclaimed) == sorted(f"r{i}" for i in range(ROLLOUTS)), "each rollout claimed again exactly once"
    assert all(s == ["running", "queued", "running"] for s in states), states


def test_gateways_sharing_one_database_finish_in_distinct_order(shared_stores) -> None:
    async def claim_then_finish(stores: list[SqlStore]) -> list[int]:
        claimed = await claim_all(stores, 60.0)
        finished = await asyncio.gather(*(
            stores[i % GATEWAYS].transition(rollout_id, RolloutPatch(state=RolloutState.SUCCEEDED))
            for i, rollout_id in enumerate(claimed)))
        return [r.finished_seq for r in finished]

    finished_seqs = shared_stores(claim_then_finish)
    assert sorted(finished_seqs) == list(range(1, ROLLOUTS + 1)), "finished cursors are distinct and gapless"


def test_a_call_with_a_long_model_name_is_recorded_as_on_sqlite(postgres_server) -> None:
    """What the harness or the upstream sends (model, response id, finish reason) is stored unbounded: a bounded
    column that SQLite ignores made PostgreSQL refuse the row, and the answer became a 500. (The only registered
    model serves any name the harness asks for.)"""
    upstream = InProcessScripted(Script(prompt_tokens=4, response_tokens=2)).start()
    gateway = InProcessGateway(db_url=postgres_server.create_database("long")).start()
    try:
        with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
            admin.register_model("policy", upstream.base_url)
            [created] = admin.create_rollouts([RolloutSpec(id="r", group_id="g")])
            answer = httpx.post(created.base_url + "/chat/completions", timeout=30,
                                headers={"authorization": f"Bearer {created.api_key}"},
                                json={"model": "m" * 300, "messages": [{"role": "user", "content": "hi"}]})
            assert answer.status_code == 200, answer.text
            assert [call.model for call in admin.calls("r")] == ["m" * 300]
    finally:
        gateway.stop()
        upstream.stop()


def timed(fn):
    started = time.monotonic()
    result = fn()
    return result, time.monotonic() - started


def test_a_locked_database_gives_503_within_2_s_while_health_and_reads_stay_fast(postgres_server) -> None:
    """PostgreSQL's form of the locked-store test (test_store_unavailable.py): another session holds EXCLUSIVE locks
    on the tables (reads pass, writes wait), the gateway answers writes 503 with Retry-After in <= 2 s, and writes
    again once the lock is released; the refused call left nothing behind."""
    url = postgres_server.create_database("gwlocked")
    upstream = InProcessScripted(Script(prompt_tokens=4, response_tokens=2)).start()
    gateway = InProcessGateway(db_url=url).start()
    try:
        with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
            admin.register_model("policy", upstream.base_url)
            (created, other) = create_rollouts(admin, 2, prefix="locked")
            post = lambda: httpx.post(created.base_url + "/chat/completions", json=chat(), timeout=30,  # noqa: E731
                                      headers={"authorization": f"Bearer {created.api_key}"})
            with connect(url) as holder:
                holder.execute("LOCK TABLE calls, rollouts, events IN EXCLUSIVE MODE")
                with ThreadPoolExecutor(1) as pool, httpx.Client(base_url=gateway.url, timeout=30) as probe:
                    probe.get("/health")  # connected before the clock starts (a new client costs 0.1-0.4 s loaded)
                    refusal = pool.submit(timed, post)  # health and a read are timed while this write waits
                    health = [timed(lambda: probe.get("/health")) for _ in range(3)]
                    read, read_s = timed(lambda: admin.get_rollout(other.id))
                    (refused, refused_s) = refusal.result()
                holder.rollback()
            answered = post()
            recorded = admin.calls(created.id)
    finally:
        gateway.stop()
        upstream.stop()
    error = error_of(refused, 503)
    assert error["code"] == "store_unavailable" and refused.headers["retry-after"], error
    assert refused_s <= 2.0, refused_s
    assert all(r.status_code == 200 and seconds < 0.5 for r, seconds in health), health
    assert read.id == other.id and read_s < 0.5
    assert answered.status_code == 200 and len(recorded) == 1


def test_a_write_blocked_by_another_sessions_lock_fails_after_the_lock_timeout_then_writes_resume(
        postgres_server) -> None:
    url = postgres_server.create_database("locked")
    engine = make_engine(url, lock_timeout_s=0.5)
    table = sa.Table("items", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True))
    table.create(engine)
    holder = connect(url)
    try:
        holder.execute("LOCK TABLE items IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        with pytest.raises(sa.exc.OperationalError, match="lock timeout"), engine.begin() as conn:
            conn.execute(table.insert().values(id=1))
        assert time.monotonic() - started < 5.0
        holder.rollback()
        with engine.begin() as conn:
            conn.execute(table.insert().values(id=2))
        with engine.connect() as conn:
            assert conn.execute(sa.select(table.c.id)).scalars().all() == [2]
    finally:
        holder.close()
        engine.dispose()
