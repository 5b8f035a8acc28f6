"""Everything the gateway acknowledged survives a SIGKILL: a burst of concurrent calls through the real engine, the
gateway killed mid-burst and restarted on the same store, and every call that returned 200 is recorded."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import openai

from gateway.client import GatewayClient
from gateway.records import RolloutSpec
from tests.gateway.support import ADMIN_TOKEN, GatewayProcess

CALLS = 64
ROLLOUTS = 8


def test_every_acknowledged_call_survives_kill_9(tmp_path, engine_url):
    gw = GatewayProcess(tmp_path / "store.db").start()
    try:
        with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
            admin.register_model("tiny", engine_url + "/v1")
            created = admin.create_rollouts([RolloutSpec(id=f"burst-{i}", group_id="burst") for i in range(ROLLOUTS)])
        clients = [openai.OpenAI(base_url=c.base_url, api_key=c.api_key, max_retries=0, timeout=30) for c in created]
        acknowledged: list[tuple[str, str]] = []
        enough = threading.Event()
        lock = threading.Lock()

        def call(i: int) -> None:
            try:
                answer = clients[i % ROLLOUTS].chat.completions.create(
                    model="tiny", messages=[{"role": "user", "content": f"call {i}"}], max_tokens=16, seed=i)
            except openai.APIError:
                return  # cut off by the kill: never acknowledged
            with lock:
                acknowledged.append((created[i % ROLLOUTS].id, answer.id))
                if len(acknowledged) >= 12:
                    enough.set()

        with ThreadPoolExecutor(max_workers=16) as pool:
            futures = [pool.submit(call, i) for i in range(CALLS)]
            assert enough.wait(timeout=120), "the burst did not get going"
            gw.kill9()
            for future in futures:
                future.result()
        assert 12 <= len(acknowledged) < CALLS, "the kill must land mid-burst"

        gw.start()
        with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
            recorded = {(c.rollout_id, c.response_id) for r in created for c in admin.calls(r.id)}
        missing = [ack for ack in acknowledged if ack not in recorded]
        assert not missing, f"{len(missing)} acknowledged calls were lost: {missing[:5]}"
    finally:
        gw.stop()
