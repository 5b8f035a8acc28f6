"""Responses chains in constant time (issue 29 point 3): a call that continues an answer by `previous_response_id`
reads that answer's stored continuation (`gateway/continuation.py`), and what the engine gets is exactly what it got
before the continuation was stored: the chain's recorded calls followed back (`recorded_chain`, the earlier gateway's
algorithm, kept here as the oracle), and the same conversation sent whole. Deep chains (unary and streamed answers,
parallel function calls and their outputs), a chain across a gateway restart, a store an older gateway wrote (no
continuation column: the store gets it and its index when it opens; its answers are not continued, a 400 naming the
fix, and the chains begun after continue), and ids of another rollout, another attempt, a failed call or another
protocol refused as before."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import sqlalchemy as sa

from gateway.client import GatewayClient
from gateway.errors import BadRequest
from gateway.protocols.base import ProtocolAdapter
from gateway.protocols.responses import RESPONSES
from gateway.records import CallRecord, CallStatus, RolloutSpec, RolloutState
from gateway.scripted import Script
from gateway.sql import make_engine
from gateway.store import SqlStore
from gateway.store_roles import StoredContinuation
from tests.gateway.api_support import create_rollouts, current_key
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway, InProcessScripted

INSTRUCTIONS = "Fix the failing test; be brief."
TOOLS = [{"type": "function", "name": name, "parameters": {"type": "object", "properties": {}}}
         for name in ("read_file", "run")]


@pytest.fixture(scope="module")
def upstream():
    """Every answer calls read_file and run (parallel calls) after its text; an answer to tool results is text."""
    scripted = InProcessScripted(Script(prompt_tokens=8, response_tokens=4, tool_calls=("read_file", "run"),
                                        answer_tool_results=True)).start()
    yield scripted
    scripted.stop()


@pytest.fixture(scope="module")
def store_path(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("chains") / "store.db"


@pytest.fixture(scope="module")
def gateway(store_path, upstream):
    gw = InProcessGateway(store_path).start()
    with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
        admin.register_model("policy", upstream.base_url)
    yield gw
    gw.stop()


def respond(base_url: str, key: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(base_url + "/responses", json=body, headers={"authorization": f"Bearer {key}"}, timeout=30)


def answer_of(response: httpx.Response) -> dict[str, Any]:
    """The `response` object of a unary answer, or of a stream's final event."""
    assert response.status_code == 200, response.text
    if not response.headers["content-type"].startswith("text/event-stream"):
        return response.json()
    data = [orjson.loads(line[5:]) for line in response.text.split("\n") if line.startswith("data:")]
    assert data[-1]["type"] in ("response.completed", "response.incomplete"), data[-1]
    return data[-1]["response"]


def engine_messages(upstream: InProcessScripted) -> list[dict[str, Any]]:
    path, body = upstream.upstream.last_request
    assert path == "/v1/chat/completions"
    return orjson.loads(body)["messages"]


def next_input(turn: int, output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The harness's next input: the outputs of the answer's function calls, else a new user message."""
    calls = [item for item in output if item["type"] == "function_call"]
    if calls:
        return [{"type": "function_call_output", "call_id": c["call_id"], "output": f"out {turn} {c['name']}"}
                for c in calls]
    return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"step {turn}"}]}]


class Chain:
    """One rollout's chain of Responses calls, and the conversation it holds as input items."""

    def __init__(self, base_url: str, key: str) -> None:
        self.base_url, self.key = base_url, key
        self.last: str | None = None
        self.conversation: list[dict[str, Any]] = []
        self.output: list[dict[str, Any]] = []

    def body(self, items: list[dict[str, Any]], *, stream: bool, previous: str | None) -> dict[str, Any]:
        body = {"model": "policy", "instructions": INSTRUCTIONS, "input": items, "tools": TOOLS, "stream": stream}
        return body if previous is None else {**body, "previous_response_id": previous}

    def step(self, turn: int, *, stream: bool) -> dict[str, Any]:
        """Continue the chain with the next input; the chained request's body."""
        items = next_input(turn, self.output)
        body = self.body(items, stream=stream, previous=self.last)
        answer = answer_of(respond(self.base_url, self.key, body))
        self.conversation += [*items, *answer["output"]]
        self.last, self.output = answer["id"], answer["output"]
        return body


def stored_continuation(store_path: Path, response_id: str) -> bytes | None:
    engine = make_engine(f"sqlite:///{store_path}")
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT continuation FROM calls WHERE response_id = :r"),
                                {"r": response_id}).scalar()
    finally:
        engine.dispose()


def recorded_chain(adapter: ProtocolAdapter, previous: str, calls: list[CallRecord], rollout_id: str,
                   attempt: int) -> list[Any]:
    """The turns of the chain ending with the answer `previous`, followed back through `calls` (one attempt's ok
    calls of the adapter's kind count), oldest first; BadRequest naming the first id that is not among them."""
    by_id: dict[str, CallRecord] = {c.response_id: c for c in calls if c.response_id is not None
                                    and c.kind == adapter.kind and c.status == CallStatus.OK}
    chain: list[CallRecord] = []
    current: str | None = previous
    while current is not None:
        call = by_id.pop(current, None)  # popped: a cycle ends as a missing id
        if call is None:
            raise BadRequest(f"previous response {current!r} is not a recorded answer of attempt {attempt} of "
                             f"rollout {rollout_id!r}; send the whole conversation instead, or an id this rollout's "
                             "gateway returned", param="previous_response_id")
        chain.append(call)
        current = adapter.previous_id(call.request)
    return [adapter.continued(call.request, call.response_raw) for call in reversed(chain)]


def previous_algorithm(admin: GatewayClient, rollout_id: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The engine's messages for `body` as the gateway computed them before continuations were stored: the chain
    followed back through the attempt's recorded calls, each call's input and output items prepended."""
    calls = admin.calls(rollout_id, attempt=0)
    turns = recorded_chain(RESPONSES, body["previous_response_id"], calls, rollout_id, 0)
    return RESPONSES.to_chat(body, turns)["messages"]


def test_a_deep_chain_continues_exactly_as_before_and_as_the_whole_conversation(admin, upstream, store_path):
    (created,) = create_rollouts(admin, prefix="deep")
    chain = Chain(created.base_url, created.api_key)
    for turn in range(60):
        chain.step(turn, stream=turn % 3 == 1)
        if turn % 20 != 19:
            continue
        items = next_input(turn + 1, chain.output)
        chained = chain.body(items, stream=turn % 2 == 0, previous=chain.last)
        answer_of(respond(created.base_url, created.api_key, chained))
        sent_chained = engine_messages(upstream)
        answer_of(respond(created.base_url, created.api_key,
                          chain.body([*chain.conversation, *items], stream=False, previous=None)))
        assert sent_chained == engine_messages(upstream)
        assert sent_chained == previous_algorithm(admin, created.id, chained)
        assert sent_chained[0] == {"role": "system", "content": INSTRUCTIONS} and len(sent_chained) > turn
    turns = recorded_chain(RESPONSES, chain.last, admin.calls(created.id, attempt=0), created.id, 0)
    assert orjson.loads(stored_continuation(store_path, chain.last)) == turns
    assert len(turns) == 60


def test_a_chain_continues_across_a_gateway_restart(gateway, admin, upstream):
    (created,) = create_rollouts(admin, prefix="restart")
    chain = Chain(created.base_url, created.api_key)
    for turn in range(5):
        chain.step(turn, stream=turn == 2)
    gateway.stop()
    gateway.start()
    with GatewayClient(gateway.url, ADMIN_TOKEN) as fresh:
        body = chain.step(5, stream=True)
        assert engine_messages(upstream) == previous_algorithm(fresh, created.id, body)
        chain.step(6, stream=False)


def test_an_older_gateways_store_gets_the_column_and_its_answers_are_refused_naming_the_fix(store_path, upstream):
    """A chain recorded before continuations were stored (the calls table without the column and its index): the
    store adds both when it opens; an answer recorded then is not followed back (that read every call of the
    attempt), its id is a 400 naming the fix; the conversation sent whole once, the chain continues."""
    path = store_path.parent / "older.db"
    gw = InProcessGateway(path).start()
    try:
        with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
            admin.register_model("policy", upstream.base_url)
            (created,) = create_rollouts(admin, prefix="older")
            chain = Chain(created.base_url, created.api_key)
            for turn in range(4):
                chain.step(turn, stream=turn == 1)
        gw.stop()
        engine = make_engine(f"sqlite:///{path}")
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP INDEX ix_calls_continued")
            conn.exec_driver_sql("ALTER TABLE calls DROP COLUMN continuation")
        gw.start()
        with engine.connect() as conn:
            assert "continuation" in {c["name"] for c in sa.inspect(conn).get_columns("calls")}
            assert "ix_calls_continued" in {i["name"] for i in sa.inspect(conn).get_indexes("calls")}
        engine.dispose()
        with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
            refused = respond(created.base_url, created.api_key, chain.body(next_input(4, chain.output),
                                                                             stream=False, previous=chain.last))
            assert refused.status_code == 400 and chain.last in refused.json()["error"]["message"]
            assert "send the whole conversation" in refused.json()["error"]["message"]
            items = next_input(4, chain.output)
            whole = answer_of(respond(created.base_url, created.api_key,
                                      chain.body([*chain.conversation, *items], stream=False, previous=None)))
            chain.conversation += [*items, *whole["output"]]
            chain.last, chain.output = whole["id"], whole["output"]
            body = chain.step(5, stream=True)
            assert engine_messages(upstream) == previous_algorithm(admin, created.id, body)
            turns = recorded_chain(RESPONSES, chain.last, admin.calls(created.id, attempt=0), created.id, 0)
            assert orjson.loads(stored_continuation(path, chain.last)) == turns and len(turns) == 2
    finally:
        gw.stop()


def test_another_attempts_answer_is_refused_as_before(admin):
    (created,) = create_rollouts(admin, prefix="attempts")
    (claimed,) = [r for r in admin.claim("c1", limit=1000) if r.id == created.id] or [None]
    assert claimed is not None
    first = current_key(admin, created.id)
    old = answer_of(respond(first.base_url, first.api_key, {"model": "policy", "input": "hi"}))["id"]
    admin.set_state(created.id, RolloutState.QUEUED, error="node lost", attempt=1, controller_id="c1")
    assert any(r.id == created.id for r in admin.claim("c2", limit=1000))
    second = current_key(admin, created.id)
    refused = respond(second.base_url, second.api_key, {"model": "policy", "input": "go", "previous_response_id": old})
    assert refused.status_code == 400 and old in refused.json()["error"]["message"]
    assert refused.json()["error"]["type"] == "invalid_request_error"


def row(seq: int, **fields: Any) -> dict[str, Any]:
    base = {"rollout_id": "r", "attempt": 0, "seq": seq, "kind": "responses", "stream": False, "model": "m",
            "upstream": None, "status": "ok", "http_status": 200, "error": None, "error_code": None,
            "request": b"{}", "response_raw": b"{}", "response_id": f"resp_{seq}", "prompt_token_ids": b"",
            "response_token_ids": b"", "response_logprobs": b"", "response_text": None, "finish_reason": None,
            "n_choices": 1, "extra_choices": None, "side": False, "sampling": None, "policy_version": 0,
            "latency_ms": 1.0, "created_at": 0.0, "continuation": b"[[1]]"}
    return {**base, **fields}


async def insert_rows(store: SqlStore, rows: list[dict[str, Any]]) -> None:
    """Insert rollout "r"'s call rows: attempt 0's (before any claim), then, once "r" is claimed, attempt 1's (the
    store records a call only for its rollout's live attempt: gateway/call_fence.py)."""
    for attempt in (0, 1):
        if attempt == 1:
            await store.claim("c", 1, 600.0)
        for call in rows:
            if call["attempt"] == attempt:
                await store.insert_call(call)


def test_the_store_finds_a_continuation_only_for_its_own_ok_answer(tmp_path):
    async def main() -> list[bytes | None]:
        store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
        try:
            await store.create_rollouts([RolloutSpec(id="r", group_id="g")])
            await insert_rows(store, [row(i, **fields) for i, fields in enumerate(
                [{}, {"status": "error"}, {"kind": "chat"}, {"continuation": None}, {"attempt": 1}])])
            found = [await store.continuation("r", 0, f"resp_{i}", "responses") for i in range(5)] + [
                await store.continuation("r", 1, "resp_4", "responses"),
                await store.continuation("other", 0, "resp_0", "responses")]
            bounded = [await store.continuation("r", 0, "resp_0", "responses", max_bytes=size) for size in (5, 4)]
            return [f.data if f is not None else None for f in found], bounded
        finally:
            store.close()

    found, bounded = asyncio.run(main())
    assert found == [b"[[1]]", None, None, None, None, b"[[1]]", None]
    # one longer than max_bytes: its size read, not its JSON
    assert bounded == [StoredContinuation(5, b"[[1]]"), StoredContinuation(5, None)]
    (call,) = [c for c in asyncio.run(_listed(tmp_path)) if c.seq == 0]
    assert "continuation" not in call.model_dump()  # a record never carries it


async def _listed(tmp_path: Path):
    store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        return await store.list_calls("r", 0)
    finally:
        store.close()
