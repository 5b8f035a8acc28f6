"""`harnessrl gateway serve` stopped (SIGTERM) with a finished-feed long-poll in flight exits at once and answers the
poll its page, rather than waiting the poll out (uvicorn's graceful stop alone took 29 s for a 30 s poll)."""

from __future__ import annotations

import threading
import time

import httpx

from tests.gateway.support import ADMIN_TOKEN, GatewayProcess

POLL_WAIT_S = 120  # far above any stop this test allows, so a slow machine cannot pass a stop that waited it out


def test_a_stop_answers_the_long_poll_in_flight_and_exits_at_once(tmp_path):
    gateway = GatewayProcess(db_path=tmp_path / "gateway.db").start()
    answered: dict = {}

    def poll() -> None:
        response = httpx.get(f"{gateway.url}/v1/admin/rollouts/finished", params={"wait_s": POLL_WAIT_S},
                             headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=POLL_WAIT_S + 30)
        answered.update(status=response.status_code, body=response.json())

    try:
        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        time.sleep(1.0)  # the poll is in flight
        assert thread.is_alive()
        started = time.monotonic()
        gateway.proc.terminate()
        gateway.proc.wait(timeout=POLL_WAIT_S / 2)
        stopped_s = time.monotonic() - started
        thread.join(timeout=30)
    finally:
        gateway.stop()
    assert stopped_s < POLL_WAIT_S / 4, stopped_s
    assert answered == {"status": 200, "body": {"rollouts": [], "cursor": 0}}, answered
