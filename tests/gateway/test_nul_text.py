"""A NUL character (U+0000) in any text the store keeps: the engine's text and the texts built from it are stored
losslessly on both stores (PostgreSQL's text columns hold no NUL: `gateway.nul_text`); a harness's model name with
one is its error (400 naming `model`), never a 500."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gateway.client import GatewayClient
from gateway.nul_text import MARK, from_column, to_column
from gateway.records import FailureKind, RolloutPatch, RolloutSpec, RolloutState
from gateway.store import SqlStore
from tests.gateway.api_support import new_id
from tests.gateway.support import ADMIN_TOKEN
from tests.gateway.test_responses_chains import row
from tests.inprocess import InProcessGateway

NUL_TEXT = "a\x00b"
TEXTS = ["", "plain", "\x00", NUL_TEXT, MARK, MARK + '"x"', MARK + "\x00", "\\u0000", "é\x00😀"]


@pytest.mark.parametrize("text", TEXTS)
def test_every_text_reads_back_as_itself(text: str) -> None:
    stored = to_column(text)
    assert "\x00" not in stored and from_column(stored) == text
    assert (stored is text) == ("\x00" not in text and not text.startswith(MARK))  # the common case is not copied


STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.slow)]


@pytest.fixture(params=STORES)
def nul_store_url(request, tmp_path) -> str:
    if request.param == "postgres":
        return request.getfixturevalue("postgres_server").create_database("nul_store")
    return f"sqlite:///{tmp_path / 'store.db'}"


def test_the_engines_text_with_nul_is_recorded_exactly(nul_store_url) -> None:
    """Every text column of a call (the engine's text, error, finish reason, response id; the model name too) and a
    rollout's error keep a NUL, and the continuation lookup by a response id with one finds its answer."""
    texts = {"model": "m\x00", "error": "boom\x00", "response_id": "resp\x00id", "response_text": NUL_TEXT,
             "finish_reason": "stop\x00"}

    async def main():
        store = SqlStore(nul_store_url)
        try:
            await store.create_rollouts([RolloutSpec(id="r", group_id="g")])
            await store.insert_call(row(0, **texts))
            await store.insert_call(row(1, response_text=MARK + "kept"))
            found = await store.continuation("r", 0, "resp\x00id", "responses")
            calls = await store.list_calls("r", 0)
            await store.claim("c", 1, 600.0)
            await store.transition("r", RolloutPatch(state=RolloutState.FAILED, failure_kind=FailureKind.AGENT,
                                                     error="harness said \x00", attempt=1, controller_id="c"))
            return found, calls, await store.get_rollout("r")
        finally:
            store.close()

    found, calls, rollout = asyncio.run(main())
    assert found.data == b"[[1]]"
    assert {name: getattr(calls[0], name) for name in texts} == texts
    assert calls[1].response_text == MARK + "kept"
    assert rollout.error == "harness said \x00"


@pytest.mark.parametrize("store", STORES)
def test_a_model_name_with_nul_is_the_harness_s_error(store, tmp_path, scripted, request) -> None:
    url = (request.getfixturevalue("postgres_server").create_database("nul_model") if store == "postgres"
           else f"sqlite:///{tmp_path / 'store.db'}")
    gateway = InProcessGateway(db_url=url).start()
    try:
        with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
            admin.register_model("policy", scripted.base_url, version=3)
            rollout_id = new_id("nul")
            admin.create_rollouts([RolloutSpec(id=rollout_id, group_id=new_id("g"))])
            (claimed,) = [r for r in admin.claim("ctl", limit=1000, lease_s=600) if r.id == rollout_id]
            headers = {"authorization": f"Bearer {claimed.api_key}"}
            hi = [{"role": "user", "content": "hi"}]
            asked = [("/chat/completions", {"model": "po\x00licy", "messages": hi}),
                     ("/messages", {"model": "po\x00licy", "max_tokens": 8, "messages": hi}),
                     ("/chat/completions", {"model": "policy", "messages": [{"role": "user", "content": "h\x00i"}]})]
            answers = [httpx.post(claimed.base_url + path, json=body, timeout=30, headers=headers)
                       for path, body in asked]
            assert [a.status_code for a in answers] == [400, 400, 200], [a.text[:300] for a in answers]
            assert answers[0].json()["error"]["param"] == "model"
            (call,) = admin.calls(rollout_id, attempt=1)
            assert call.request["messages"][0]["content"] == "h\x00i"  # bytes of the request kept as sent
    finally:
        gateway.stop()
