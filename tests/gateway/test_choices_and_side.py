"""Every choice of an `n` > 1 answer is recorded, side calls are marked, and harness model names reach the policy
through the gateway config's aliases and default (issue 13, points 2 and 3). Runs on SQLite and, in the slow tier, on
PostgreSQL (a store-contract module, tests/gateway/conftest.py); an older database without the new columns gets them
when the store opens."""

from __future__ import annotations

import asyncio

import httpx
import orjson
import pytest
import sqlalchemy as sa

from gateway.client import GatewayClient
from gateway.records import CallRecord, RolloutSpec
from gateway.sql import make_engine
from gateway.store import SqlStore
from tests.gateway.api_support import chat, create_rollouts, error_of, write_config
from tests.gateway.hostile_upstream import Answer, HostileUpstream
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway

SSE = "text/event-stream"
CONFIG = {"model_aliases": {"claude-*": "policy", "gpt-*": "policy"}, "side_models": ["claude-*haiku*"]}


def choice(index: int, ids: list[int], text: str, finish: str | None, *, delta: bool = False) -> dict:
    return {"index": index, ("delta" if delta else "message"): {"content": text}, "token_ids": ids,
            "logprobs": {"content": [{"logprob": -0.125 * (t % 5)} for t in ids]}, "finish_reason": finish}


N2_UNARY = {"id": "c-n2", "prompt_token_ids": [1, 2, 3], "policy_version": 7,
            "choices": [choice(0, [10, 11], "ab", "stop"), choice(1, [20, 21, 22], "xyz", "length")]}
N2_STREAM = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in [
    {"id": "c-s", "prompt_token_ids": [1, 2, 3], "policy_version": 7, "choices": []},
    {"id": "c-s", "choices": [choice(1, [20], "x", None, delta=True)]},
    {"id": "c-s", "choices": [choice(0, [10], "a", None, delta=True)]},
    {"id": "c-s", "choices": [choice(1, [21], "y", None, delta=True)]},
    {"id": "c-s", "choices": [choice(0, [11], "b", "stop", delta=True)]},
    {"id": "c-s", "choices": [choice(1, [22], "z", "length", delta=True)]},
]) + b"data: [DONE]\n\n"


@pytest.fixture(scope="module")
def upstream():
    hostile = HostileUpstream().start()
    yield hostile
    hostile.stop()


@pytest.fixture(scope="module")
def admin(store_url, upstream, tmp_path_factory):
    """A gateway with CONFIG in front of `upstream`, registered as `policy`, and `other` (so that a name no alias
    covers is not silently sent to the only model)."""
    config = write_config(tmp_path_factory.mktemp("cfg") / "gateway.yaml", **CONFIG)
    gw = InProcessGateway(db_url=store_url, config_path=config).start()
    with GatewayClient(gw.url, ADMIN_TOKEN) as client:
        client.register_model("policy", upstream.base_url, version=7)
        client.register_model("other", upstream.base_url, version=0)
        yield client
    gw.stop()


def post(created, body: dict) -> httpx.Response:
    return httpx.post(created.base_url + "/chat/completions", json=body, timeout=30,
                      headers={"authorization": f"Bearer {created.api_key}"})


def only_call(admin: GatewayClient, rollout_id: str) -> CallRecord:
    (call,) = admin.calls(rollout_id)
    return call


def check_two_choices(call: CallRecord) -> None:
    assert (call.prompt_token_ids, call.response_token_ids, call.response_text) == ([1, 2, 3], [10, 11], "ab")
    assert (call.finish_reason, call.n_choices, call.policy_version) == ("stop", 2, 7)
    (second,) = call.extra_choices
    assert (second.index, second.prompt_token_ids, second.response_token_ids) == (1, [], [20, 21, 22])
    assert second.response_logprobs == [0.0, -0.125, -0.25]
    assert (second.response_text, second.finish_reason) == ("xyz", "length")


def test_every_choice_of_a_unary_answer_is_recorded(admin, upstream) -> None:
    upstream.answer = Answer((orjson.dumps(N2_UNARY),))
    (created,) = create_rollouts(admin, prefix="n2")
    response = post(created, chat("policy", n=2))
    assert response.status_code == 200 and len(response.json()["choices"]) == 2
    check_two_choices(only_call(admin, created.id))


def test_every_choice_of_an_interleaved_stream_is_recorded(admin, upstream) -> None:
    upstream.answer = Answer((N2_STREAM,), headers=(("content-type", SSE),), pause_s=0.0)
    (created,) = create_rollouts(admin, prefix="n2s")
    response = post(created, chat("policy", n=2, stream=True))
    assert response.status_code == 200 and response.text.endswith("data: [DONE]\n\n")
    call = only_call(admin, created.id)
    assert call.stream
    check_two_choices(call)


def test_a_single_choice_has_no_extra_choices(admin, upstream) -> None:
    upstream.answer = Answer((orjson.dumps({**N2_UNARY, "choices": N2_UNARY["choices"][:1]}),))
    (created,) = create_rollouts(admin, prefix="n1")
    assert post(created, chat("policy")).status_code == 200
    call = only_call(admin, created.id)
    assert (call.n_choices, call.extra_choices, call.side) == (1, [], False)


@pytest.mark.parametrize(("model", "side"), [("claude-3-5-haiku-20241022", True), ("claude-opus-5-5", False),
                                             ("gpt-5-codex", False), ("policy", False)])
def test_harness_names_reach_the_policy_and_side_models_are_marked(admin, upstream, model: str,
                                                                   side: bool) -> None:
    upstream.answer = Answer((orjson.dumps({**N2_UNARY, "choices": N2_UNARY["choices"][:1]}),))
    (created,) = create_rollouts(admin, prefix="side")
    response = post(created, chat(model))
    assert response.status_code == 200 and response.headers["x-policy-version"] == "7"
    call = only_call(admin, created.id)
    assert (call.model, call.side, call.upstream) == (model, side, upstream.base_url.rstrip("/"))


def test_a_name_no_alias_covers_is_404_naming_the_models_and_config_keys(admin) -> None:
    (created,) = create_rollouts(admin, prefix="unknown")
    error = error_of(post(created, chat("mistral-large")), 404)
    assert error["code"] == "model_not_found" and error["param"] == "model"
    assert "other, policy" in error["message"] and "model_aliases" in error["message"]
    assert admin.calls(created.id) == []


def test_the_harness_model_list_names_the_registered_models(admin) -> None:
    (created,) = create_rollouts(admin, prefix="models")
    listed = httpx.get(created.base_url + "/models", headers={"authorization": f"Bearer {created.api_key}"})
    assert [m["id"] for m in listed.json()["data"]] == ["other", "policy"]


@pytest.fixture
def empty_url(request, store_url, tmp_path) -> str:
    """A new empty store of the same kind as `store_url` (the module's own gateway keeps using that one)."""
    if store_url.startswith("sqlite"):
        return f"sqlite:///{tmp_path / 'old.db'}"
    return request.getfixturevalue("postgres_server").create_database("old")


def test_an_older_database_gets_the_new_columns_and_keeps_its_calls(empty_url) -> None:
    """A store written before `extra_choices` and `side` existed: its calls table lacks both; opening it adds them
    (side false and no extra choices for the old rows)."""
    row = {"rollout_id": "old", "attempt": 0, "seq": 0, "kind": "chat", "stream": False, "model": "policy",
           "status": "ok", "http_status": 200, "request": b"{}", "prompt_token_ids": b"\x01\x00\x00\x00",
           "response_token_ids": b"", "response_logprobs": b"", "n_choices": 1, "latency_ms": 1.0,
           "created_at": 0.0}
    engine = make_engine(empty_url)

    async def main() -> list[CallRecord]:
        SqlStore(empty_url).close()
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE calls")
            conn.exec_driver_sql(old_calls_ddl(engine))
            conn.execute(sa.text(f"INSERT INTO calls ({', '.join(row)}) VALUES ({', '.join(':' + k for k in row)})"),
                         row)
            columns = {c["name"] for c in sa.inspect(conn).get_columns("calls")}
            assert not {"extra_choices", "side", "sampling", "error_code"} & columns
        store = SqlStore(empty_url)
        try:
            await store.create_rollouts([RolloutSpec(id="old", group_id="g")])
            return await store.list_calls("old", None)
        finally:
            store.close()

    try:
        (call,) = asyncio.run(main())
        with engine.connect() as conn:
            columns = {c["name"] for c in sa.inspect(conn).get_columns("calls")}
            assert {"extra_choices", "side", "sampling", "error_code"} <= columns
    finally:
        engine.dispose()
    assert (call.prompt_token_ids, call.side, call.extra_choices, call.n_choices) == ([1], False, [], 1)
    assert call.sampling is None  # recorded before sampling was: unknown
    assert call.error_code is None  # recorded before error codes were


def old_calls_ddl(engine: sa.Engine) -> str:
    """The calls table as the first release created it (no extra_choices, no side)."""
    blob, ident = ("BYTEA", "SERIAL") if engine.dialect.name == "postgresql" else ("BLOB", "INTEGER")
    return (f"CREATE TABLE calls (id {ident} PRIMARY KEY, rollout_id VARCHAR(200) NOT NULL, attempt INTEGER NOT NULL,"
            " seq INTEGER NOT NULL DEFAULT 0, kind VARCHAR(16) NOT NULL, stream BOOLEAN NOT NULL, model TEXT NOT NULL,"
            " upstream VARCHAR(500), status VARCHAR(8) NOT NULL, http_status INTEGER NOT NULL, error TEXT,"
            f" request {blob} NOT NULL, response_raw {blob}, response_id TEXT, prompt_token_ids {blob} NOT NULL,"
            f" response_token_ids {blob} NOT NULL, response_logprobs {blob} NOT NULL, response_text TEXT,"
            " finish_reason TEXT, n_choices INTEGER NOT NULL, policy_version INTEGER,"
            " latency_ms FLOAT NOT NULL, created_at FLOAT NOT NULL)")


def test_a_token_count_is_a_side_call_whatever_its_model(admin, upstream) -> None:
    upstream.answer = Answer((orjson.dumps({"count": 3, "tokens": [1, 2, 3], "max_model_len": 64}),))
    (created,) = create_rollouts(admin, prefix="count")
    response = httpx.post(created.base_url + "/messages/count_tokens", timeout=30,
                          headers={"x-api-key": created.api_key, "anthropic-version": "2023-06-01"},
                          json={"model": "claude-opus-5-5", "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 200, response.text
    assert response.json()["input_tokens"] == 3
    call = only_call(admin, created.id)
    assert (call.kind, call.side, call.prompt_token_ids) == ("count_tokens", True, [1, 2, 3])
