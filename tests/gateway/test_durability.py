"""Everything the gateway acknowledged survives a SIGKILL under load: harness calls from concurrent clients through a
real gateway process, the process killed while they keep coming, restarted on the same store, and every call that got
its answer is recorded. On SQLite (the default NORMAL: commits in the event loop) and on a real PostgreSQL server
(commits on the writer thread, the path SQLite FULL takes too; FULL only adds an fsync to what NORMAL survives)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
import pytest

from gateway.client import GatewayClient
from gateway.records import RolloutSpec
from gateway.scripted import Script
from tests.gateway.support import ADMIN_TOKEN, GatewayProcess
from tests.inprocess import InProcessScripted

pytestmark = pytest.mark.slow  # two gateway process starts per store, and seconds of load

CLIENTS = 16
ROLLOUTS = 8
MIN_ACKNOWLEDGED = 50
"""Calls answered before the kill is armed (the load is going); then LOAD_S more seconds of calls."""
LOAD_S = 0.5


@pytest.fixture(scope="module")
def upstream():
    server = InProcessScripted(Script(prompt_tokens=16, response_tokens=8)).start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite-NORMAL", "postgres"])
def killable_gateway(request, tmp_path):
    """A gateway process on a fresh store: SQLite at the given synchronous level, or a PostgreSQL database."""
    if request.param == "postgres":
        gw = GatewayProcess(db_url=request.getfixturevalue("postgres_server").create_database("kill9"))
    else:
        config = tmp_path / "gateway.yaml"
        config.write_text(f"sqlite_synchronous: {request.param.split('-')[1]}\n")
        gw = GatewayProcess(tmp_path / "store.db", config_path=config)
    yield gw.start()
    gw.stop()


@dataclass
class Load:
    """What the clients saw: acknowledged response ids (200 and a body) and calls cut off in flight."""

    acknowledged: list[str] = field(default_factory=list)
    cut_off: int = 0
    going: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def call_until_refused(self, base_url: str, api_key: str) -> None:
        """Chat calls back to back until the gateway stops answering; a call sent and never answered is cut off, a
        refused connection is not."""
        with httpx.Client(base_url=base_url, headers={"authorization": f"Bearer {api_key}"}, timeout=30) as client:
            while not self.stop.is_set():
                try:
                    answer = client.post("/chat/completions", json={
                        "model": "policy", "messages": [{"role": "user", "content": "go"}], "max_tokens": 8})
                except httpx.ConnectError:
                    return
                except httpx.TransportError:
                    with self.lock:
                        self.cut_off += 1
                    return
                assert answer.status_code == 200, answer.text
                with self.lock:
                    self.acknowledged.append(answer.json()["id"])
                    if len(self.acknowledged) >= MIN_ACKNOWLEDGED:
                        self.going.set()


def test_every_acknowledged_call_survives_kill_9_under_load(killable_gateway, upstream) -> None:
    gw = killable_gateway
    with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
        admin.register_model("policy", upstream.base_url)
        created = admin.create_rollouts([RolloutSpec(id=f"load-{i}", group_id="load") for i in range(ROLLOUTS)])
    load = Load()
    with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
        futures = [pool.submit(load.call_until_refused, created[i % ROLLOUTS].base_url, created[i % ROLLOUTS].api_key)
                   for i in range(CLIENTS)]
        assert load.going.wait(timeout=60), f"only {len(load.acknowledged)} calls answered in 60 s"
        time.sleep(LOAD_S)
        gw.kill9()
        load.stop.set()
        for future in futures:
            future.result(timeout=60)
    assert load.cut_off >= 1, "the kill must land while calls are in flight"

    gw.start()
    with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
        recorded = {call.response_id for r in created for call in admin.calls(r.id)}
    missing = sorted(set(load.acknowledged) - recorded)
    assert not missing, f"{len(missing)} of {len(load.acknowledged)} acknowledged calls were lost: {missing[:5]}"
