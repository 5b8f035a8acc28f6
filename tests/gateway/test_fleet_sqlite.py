"""The store's pause and the one-gateway rule on SQLite (the several-gateway behaviour on PostgreSQL is in
test_multi_gateway.py): a second gateway on one SQLite file is refused at start with the fix named; a pause is kept
in the store, so a gateway restarted during it holds calls until a resume; `paused_s` is the store's."""

from __future__ import annotations

import asyncio
import os
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from gateway.client import GatewayClient
from gateway.config import GatewayConfig
from gateway.context import open_context
from gateway.records import RolloutSpec
from gateway.scripted import Script
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway, InProcessScripted


def test_a_second_gateway_on_one_sqlite_store_is_refused_naming_postgresql(tmp_path) -> None:
    gateway = InProcessGateway(tmp_path / "store.db").start()
    try:
        config = GatewayConfig(db_url=f"sqlite:///{tmp_path / 'store.db'}", admin_token="x")
        with pytest.raises(SystemExit, match=r"already serves the SQLite store .*PostgreSQL") as refused:
            asyncio.run(open_context(config))
        assert f"pid {os.getpid()}" in str(refused.value)
    finally:
        gateway.stop()
    context = asyncio.run(open_context(config))  # the first one gone, its lock went with it
    asyncio.run(context.close())


def test_fleet_settings_that_would_count_a_live_gateway_gone_are_refused(tmp_path) -> None:
    config = GatewayConfig(db_url=f"sqlite:///{tmp_path / 'store.db'}", admin_token="x", fleet_poll_s=2.0,
                           fleet_stale_s=5.0)
    with pytest.raises(ValueError, match=r"fleet_stale_s \(5\) must be at least 3 x fleet_poll_s \(2\)"):
        asyncio.run(open_context(config))


def test_a_pause_outlives_a_gateway_restart_and_paused_s_is_the_stores(tmp_path) -> None:
    upstream = InProcessScripted(Script(prompt_tokens=4, response_tokens=2)).start()
    gateway = InProcessGateway(tmp_path / "store.db").start()
    try:
        with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
            admin.register_model("policy", upstream.base_url)
            [created] = admin.create_rollouts([RolloutSpec(id="r", group_id="g")])
            assert admin.pause(timeout_s=5).drained
            time.sleep(0.3)
        gateway.stop()
        gateway.start()  # the same store, the same port
        with GatewayClient(gateway.url, ADMIN_TOKEN) as admin, ThreadPoolExecutor(1) as pool:
            state = admin.state()
            assert state.paused and state.paused_s >= 0.3, state
            held = pool.submit(httpx.post, created.base_url + "/chat/completions", timeout=30,
                               headers={"authorization": f"Bearer {created.api_key}"},
                               json={"model": "policy", "messages": [{"role": "user", "content": "hi"}]})
            deadline = time.monotonic() + 10
            while admin.state().held != 1:
                assert time.monotonic() < deadline, "the call was not held"
                time.sleep(0.02)
            assert not held.done()
            assert not admin.resume().paused
            assert held.result(timeout=10).status_code == 200
            paused_s = admin.state().paused_s
            time.sleep(0.1)
            assert admin.state().paused_s == paused_s, "paused_s grows only while paused"
            assert [g.live for g in admin.state().gateways] == [True]
    finally:
        gateway.stop()
        upstream.stop()
