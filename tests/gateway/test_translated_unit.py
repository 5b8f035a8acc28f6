"""The translated-call forwarder's pure parts (gateway/translated.py) and the conversation a call continues
(gateway/continuation.py): the upstream request carries chat's forced fields; a stored continuation is read alone and
extended without decoding; an older gateway's `previous_id` chain is followed back through the attempt's recorded
calls (a missing or cyclic id is a 400 naming it); the tokenizer's URL and answer."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from gateway.capture import Captured, ProtocolError, capture_chunk, capture_sse
from gateway.continuation import NOTHING, Earlier, continuation, earlier_conversation
from gateway.errors import BadRequest
from gateway.protocols.anthropic import ADAPTER
from gateway.records import CallRecord, RolloutMode
from gateway.request_bytes import Held, RequestBytes, RequestBytesInFlight, RequestTooCostly
from gateway.scripted import Script, _chat_stream
from gateway.store_roles import StoredContinuation
from gateway.strict_json import parse_bytes
from gateway.translated import prepare, tokenize_url, tokenized_ids

REQUEST = {"model": "claude-x", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(("mode", "stream"), [(RolloutMode.TRAIN, False), (RolloutMode.TRAIN, True),
                                              (RolloutMode.VAL, False)])
def test_prepare_forces_chats_fields_and_fixes_the_answers_id(mode: RolloutMode, stream: bool) -> None:
    body = {**REQUEST, "stream": stream}
    call = prepare(ADAPTER, body, ADAPTER.to_chat(body, []), rollout_id="r", attempt=1, seq=4, mode=mode,
                   served_name="served")
    sent = orjson.loads(call.upstream_body)
    assert sent == {"messages": REQUEST["messages"], "max_tokens": 9, "stream": stream, "model": "served",
                    "return_token_ids": True, **({"logprobs": True} if mode == RolloutMode.TRAIN else {})}
    assert call.response_id == ADAPTER.response_id("r", 1, 4) and call.body is body


class Chained:
    """A minimal adapter whose requests continue an earlier answer through `previous`; a call's turn is its `n`
    and its answer."""

    kind = "chained"

    def previous_id(self, body: dict[str, Any]) -> str | None:
        return body.get("previous")

    def continued(self, body: dict[str, Any], response_raw: bytes | str) -> list[Any]:
        return [body["n"], response_raw.decode() if isinstance(response_raw, bytes) else response_raw]


def record(seq: int, response_id: str, previous: str | None = None, *, kind: str = "chained",
           status: str = "ok") -> CallRecord:
    return CallRecord(id=seq, rollout_id="r", attempt=0, seq=seq, kind=kind, stream=False, model="m", upstream=None,
                      status=status, http_status=200, error=None, request={"n": seq, "previous": previous},
                      response_raw=f"answer {seq}", response_id=response_id, prompt_token_ids=[],
                      response_token_ids=[], response_logprobs=[], response_text=None, finish_reason=None,
                      n_choices=1, policy_version=0, latency_ms=1.0, created_at=0.0)


def lookup(calls: list[CallRecord], body: dict[str, Any], stored: dict[str, bytes] | None = None,
           held: Held | None = None, read: list[int | None] | None = None) -> Earlier:
    """`earlier_conversation` over a store holding `calls` and the continuations `stored` (by response id), charged
    to `held` (a fresh request's by default); `read` collects the max_bytes of each continuation read."""
    listed = []

    async def continuation(rollout_id: str, attempt: int, response_id: str, kind: str,
                           max_bytes: int | None = None) -> StoredContinuation | None:
        assert (rollout_id, attempt, kind) == ("r", 0, "chained")
        if read is not None:
            read.append(max_bytes)
        data = (stored or {}).get(response_id)
        if data is None:
            return None
        return StoredContinuation(len(data), data if max_bytes is None or len(data) <= max_bytes else None)

    async def list_calls(rollout_id: str, attempt: int) -> list[CallRecord]:
        listed.append(attempt)
        return calls

    svc = SimpleNamespace(history_store=SimpleNamespace(continuation=continuation, list_calls=list_calls))
    if held is None:
        with RequestBytes(64 * 1024 * 1024, 2**31).holding("r") as held:
            return lookup(calls, body, stored, held, read)
    try:
        return asyncio.run(earlier_conversation(svc, Chained(), body, "r", 0, held))
    finally:
        assert not listed, "the attempt's calls were read"


def test_a_call_continuing_nothing_reads_nothing_and_an_older_gateways_chain_is_refused_unread() -> None:
    calls = [record(0, "a"), record(1, "b", "a"), record(2, "c", "b")]  # recorded without continuations
    assert lookup(calls, {}) == NOTHING
    with pytest.raises(BadRequest) as refused:
        lookup(calls, {"previous": "c"})
    assert "'c'" in refused.value.message and "send the whole conversation" in refused.value.message


def test_a_stored_continuation_is_read_alone_and_extended_without_decoding() -> None:
    stored = orjson.dumps([[0, "answer 0"], [1, "answer 1"]])
    earlier = lookup([], {"previous": "b"}, {"b": stored})
    assert earlier == Earlier([[0, "answer 0"], [1, "answer 1"]], stored)
    extended = continuation(Chained(), {"n": 2}, earlier.stored, b"answer 2")
    assert orjson.loads(extended) == [[0, "answer 0"], [1, "answer 1"], [2, "answer 2"]]
    assert orjson.loads(continuation(Chained(), {"n": 0}, NOTHING.stored, b"first")) == [[0, "first"]]
    assert continuation(ADAPTER, REQUEST, NOTHING.stored, b"{}") is None  # Messages: nothing continues an answer


def test_a_continuation_is_charged_to_the_request_before_it_is_read_and_before_it_is_parsed() -> None:
    stored = orjson.dumps([[i, "x" * 100] for i in range(100)])
    ledger = RequestBytes(64 * 1024 * 1024, 2**31)
    with ledger.holding("r") as held:
        read: list[int | None] = []
        earlier = lookup([], {"previous": "b"}, {"b": stored}, held, read)
        assert earlier.stored == stored and read == [64 * 1024 * 1024]  # read within the request's room
        assert held.bytes == len(stored) + parse_bytes(stored)  # its bytes, then its parse
    assert ledger.held == 0  # released with the request


def test_a_continuation_past_the_requests_room_is_refused_unread() -> None:
    stored = orjson.dumps([[i, "x" * 1000] for i in range(100)])
    read: list[int | None] = []
    with RequestBytes(len(stored) - 1, 2**31).holding("r") as held, pytest.raises(RequestTooCostly) as refused:
        lookup([], {"previous": "b"}, {"b": stored}, held, read)
    assert read == [len(stored) - 1] and held.bytes == 0  # only its size was read; nothing charged
    assert "max_request_bytes_in_flight_per_rollout" in refused.value.message
    ledger = RequestBytes(len(stored) * 10, 2**31)
    with ledger.holding("r") as other:  # another request of the rollout holds most of its share: 429, retry later
        other.add(len(stored) * 9, "a parse")
        with ledger.holding("r") as held, pytest.raises(RequestBytesInFlight):
            lookup([], {"previous": "b"}, {"b": stored}, held)


def test_a_previous_id_with_no_stored_continuation_is_400_naming_it() -> None:
    """The store's lookup answers only an ok answer of the kind, of this rollout attempt (tests/gateway/
    test_responses_chains.py: another rollout's, attempt's, protocol's or a failed call's id finds none)."""
    with pytest.raises(BadRequest) as refused:
        lookup([record(0, "a")], {"previous": "zzz"}, {"a": b"[]"})
    assert repr("zzz") in refused.value.message and refused.value.param == "previous_response_id"


def test_tokenize_url_and_answer() -> None:
    assert tokenize_url("http://h:1/v1") == "http://h:1/tokenize"
    assert tokenize_url("http://h:1/v1/") == "http://h:1/tokenize"
    assert tokenize_url("http://h:1") == "http://h:1/tokenize"
    assert tokenized_ids(b'{"count": 2, "tokens": [5, 6], "max_model_len": 9}') == [5, 6]
    for broken in (b"nope", b"[1]", b'{"tokens": [-1]}', b'{"tokens": "5,6"}', b'{"count": 3, "tokens": [5]}'):
        with pytest.raises(ProtocolError):
            tokenized_ids(broken)


def test_capturing_decoded_chunks_is_capturing_the_stream() -> None:
    raw = _chat_stream(Script(prompt_tokens=5, response_tokens=4, tool_calls=("Bash",))).replace(b"@ID@", b"1")
    cap = Captured()
    for line in raw.split(b"\n"):
        if line.startswith(b"data: {"):
            capture_chunk(cap, orjson.loads(line[6:]))
    assert cap == capture_sse(raw) and cap.response_token_ids == [5000, 5001, 5002, 5003] and not cap.broken
    capture_chunk(cap, {"choices": [{"index": 0, "token_ids": [-1]}]})
    assert cap.broken and "token IDs" in cap.error
