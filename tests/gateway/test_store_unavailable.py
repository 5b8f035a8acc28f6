"""A locked database (issue 12, point 5): another connection holds SQLite's write lock. The event loop never waits on
it: /health and reads stay fast, and every write is answered 503 with Retry-After within 2 s (a stream that already
began ends with an error event, never `[DONE]`). Once the lock is released the gateway writes again."""

from __future__ import annotations

import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from gateway.client import GatewayClient
from tests.gateway.api_support import chat, create_rollouts, current_key, error_of
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway

LIMIT_S = 2.0


@pytest.fixture(scope="module")
def locked_gateway(tmp_path_factory, scripted):
    gw = InProcessGateway(tmp_path_factory.mktemp("locked") / "store.db").start()
    with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
        admin.register_model("policy", scripted.base_url)
    yield gw
    gw.stop()


def hold_write_lock(db_path) -> sqlite3.Connection:
    holder = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    return holder


def timed(fn):
    started = time.monotonic()
    result = fn()
    return result, time.monotonic() - started


def test_a_locked_database_gives_503_with_retry_after_while_health_and_reads_stay_fast(locked_gateway) -> None:
    gw = locked_gateway
    with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
        (created, other) = create_rollouts(admin, 2, prefix="locked")
        key = current_key(admin, created.id)
        _, baseline_s = timed(lambda: httpx.post(key.base_url + "/chat/completions", json=chat(), timeout=30,
                                                 headers={"authorization": f"Bearer {key.api_key}"}))
        holder = hold_write_lock(gw.db_path)
        try:
            with ThreadPoolExecutor(4) as pool:
                call = pool.submit(timed, lambda: httpx.post(key.base_url + "/chat/completions", json=chat(),
                                                             headers={"authorization": f"Bearer {key.api_key}"},
                                                             timeout=30))
                stream = pool.submit(timed, lambda: httpx.post(key.base_url + "/chat/completions",
                                                               json=chat(stream=True), timeout=30,
                                                               headers={"authorization": f"Bearer {key.api_key}"}))
                claim = pool.submit(timed, lambda: httpx.post(gw.url + "/v1/admin/rollouts/claim", timeout=30,
                                                              json={"controller_id": "c"},
                                                              headers={"authorization": f"Bearer {ADMIN_TOKEN}"}))
                with httpx.Client(base_url=gw.url, timeout=30) as probe:  # one connection: time the loop only
                    health = [timed(lambda: probe.get("/health")) for _ in range(5)]
                read, read_s = timed(lambda: admin.get_rollout(other.id))
                (answer, call_s), (streamed, stream_s), (claimed, claim_s) = (
                    call.result(), stream.result(), claim.result())
        finally:
            holder.rollback()
            holder.close()
        after = httpx.post(key.base_url + "/chat/completions", json=chat(),
                           headers={"authorization": f"Bearer {key.api_key}"}, timeout=30)
        recorded = admin.calls(created.id)
    # a loop waiting on the lock would hold each probe until the writes gave up (1 s) or the lock went (30 s before)
    assert max(seconds for _, seconds in health) < 0.8 and all(r.status_code == 200 for r, _ in health)
    assert read.id == other.id and read_s < 0.8
    for response, seconds in ((answer, call_s), (claimed, claim_s)):
        error = error_of(response, 503)
        assert error["code"] == "store_unavailable" and "locked" in error["message"], error
        # within 2 s of waiting for the lock; a loaded machine adds what any call costs it (the baseline)
        assert response.headers["retry-after"] == "1" and seconds <= LIMIT_S + baseline_s, (seconds, baseline_s)
    assert streamed.status_code == 200 and stream_s <= LIMIT_S + baseline_s and b"[DONE]" not in streamed.content
    assert b"store_unavailable" in streamed.content
    assert after.status_code == 200 and len(recorded) == 2  # the baseline and the last: the refused left nothing
