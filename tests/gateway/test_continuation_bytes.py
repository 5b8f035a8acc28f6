"""What a Responses call continuing an earlier answer makes the served gateway hold: the stored continuation keeps
only what reached the engine (reasoning items sent with a call are not stored, so a small call continuing it loads
none of them), and a continuation is charged to the call like a body sent whole, before it is read: past the
rollout's share the call is refused with a 413 naming the setting (gateway/continuation.py, request_bytes.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
import yaml

from gateway.client import GatewayClient
from gateway.scripted import Script
from gateway.store import SqlStore
from tests.gateway.api_support import create_rollouts
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway, InProcessScripted

SHARE = 1_000_000


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("continuation-bytes")
    upstream = InProcessScripted(Script(prompt_tokens=8, response_tokens=4)).start()
    config = folder / "gateway.yaml"
    config.write_text(yaml.safe_dump({"max_request_bytes_in_flight_per_rollout": SHARE}))
    gw = InProcessGateway(folder / "store.db", config_path=config).start()
    with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
        admin.register_model("policy", upstream.base_url)
    yield gw, folder / "store.db"
    gw.stop()
    upstream.stop()


def respond(created, items: list, previous: str | None = None) -> httpx.Response:
    body = {"model": "policy", "input": items, **({"previous_response_id": previous} if previous else {})}
    return httpx.post(created.base_url + "/responses", json=body, timeout=30,
                      headers={"authorization": f"Bearer {created.api_key}"})


def user(text: str) -> dict:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def stored_size(store_path: Path, rollout_id: str, response_id: str) -> int:
    async def main() -> int:
        store = SqlStore(f"sqlite:///{store_path}")
        try:
            return (await store.continuation(rollout_id, 0, response_id, "responses")).size_bytes
        finally:
            store.close()
    return asyncio.run(main())


def test_reasoning_sent_with_a_call_is_not_stored_with_its_answer(served):
    gw, store_path = served
    with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
        (mine,) = create_rollouts(admin, 1)
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "z" * 100_000}
    first = respond(mine, [user("hi"), reasoning, reasoning])
    assert first.status_code == 200, first.text
    assert stored_size(store_path, mine.id, first.json()["id"]) < 2_000  # the 200 KB of reasoning left out
    follow = respond(mine, [user("go on")], first.json()["id"])
    assert follow.status_code == 200, follow.text


def test_a_continuation_past_the_rollouts_share_is_refused_before_it_is_read(served):
    gw, _ = served
    with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
        (mine,) = create_rollouts(admin, 1)
    first = respond(mine, [user("a" * 200_000)])  # charged about 600 KB: its bytes and its parse
    assert first.status_code == 200, first.text
    second = respond(mine, [user("b" * 200_000)], first.json()["id"])  # + its 200 KB conversation, loaded, parsed
    assert second.status_code == 413, second.text
    error = second.json()["error"]
    assert error["code"] == "request_too_costly" and "max_request_bytes_in_flight_per_rollout" in error["message"]
    small = respond(mine, [user("and now?")], first.json()["id"])  # the same conversation for a small call
    assert small.status_code == 200, small.text
