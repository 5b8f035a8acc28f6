"""Failures of a translated call (issue 13; the forwarder in gateway/translated.py, through Anthropic Messages): each
is recorded and answered in the harness protocol's own error shape, as proxy.py answers chat: an answer that breaks
the protocol or cannot be translated and an engine 5xx are 502, an engine that does not answer 502, the engine's own
refusal keeps its status, a store that cannot record 503; a stream whose headers are out ends with an `error` event
in place of its closing events, which go out only after the call is committed."""

from __future__ import annotations

import sqlite3

import httpx
import orjson
import pytest

from gateway.client import GatewayClient
from gateway.records import CallErrorCode, CallStatus
from tests.gateway.api_support import create_rollouts, write_config
from tests.gateway.hostile_upstream import Answer, HostileUpstream
from tests.gateway.support import ADMIN_TOKEN, free_port
from tests.inprocess import InProcessGateway

MESSAGES = {"model": "hostile", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
GOOD = {"id": "c1", "prompt_token_ids": [1, 2], "choices": [{"index": 0, "message": {"content": "hi"},
                                                               "token_ids": [3], "finish_reason": "stop"}]}
SSE_HEADERS = (("content-type", "text/event-stream"),)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A gateway (one upstream try per call) with the hostile upstream as `hostile` and a closed port as `dead`."""
    folder = tmp_path_factory.mktemp("translated")
    upstream = HostileUpstream().start()
    gateway = InProcessGateway(folder / "store.db", config_path=write_config(folder / "gw.yaml",
                                                                             retry_attempts=1)).start()
    with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
        admin.register_model("hostile", upstream.base_url, version=2)
        admin.register_model("dead", f"http://127.0.0.1:{free_port()}/v1")
        yield gateway, upstream, admin
    gateway.stop()
    upstream.stop()


def post(created, body: dict) -> httpx.Response:
    return httpx.post(created.base_url + "/messages", json=body, headers={"x-api-key": created.api_key}, timeout=30)


def error_of(response: httpx.Response, status: int, kind: str, code: str) -> str:
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
    assert body["error"]["type"] == kind and body["error"]["message"].endswith(f"[{code}]"), body
    return body["error"]["message"]


def sse(*chunks: dict, done: bytes = b"data: [DONE]\n\n") -> bytes:
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + done


def tool_call(arguments: str) -> dict:
    return {"index": 0, "id": "t0", "type": "function", "function": {"name": "Bash", "arguments": arguments}}


UNARY = {
    "a 200 that is not JSON": (Answer((b"<html>oops</html>",)), 502, "api_error", "upstream_protocol_error"),
    "a JSON list": (Answer((orjson.dumps([GOOD]),)), 502, "api_error", "upstream_protocol_error"),
    "the engine's own 500": (Answer((b"Internal Server Error",), status=500), 502, "api_error",
                             "upstream_protocol_error"),
    "a tool call that is not an object": (
        Answer((orjson.dumps({**GOOD, "choices": [{"index": 0, "message": {"content": "", "tool_calls": ["ls"]},
                                                   "token_ids": [3], "finish_reason": "tool_calls"}]}),)),
        502, "api_error", "upstream_protocol_error"),
    "the engine refuses the request": (
        Answer((b'{"error": {"message": "prompt is longer than the context", "type": "BadRequestError"}}',),
               status=400), 400, "invalid_request_error", "upstream_error"),
}


@pytest.mark.parametrize("case", UNARY.values(), ids=UNARY.keys())
def test_a_failed_unary_call_is_recorded_and_answered_in_anthropics_shape(served, case) -> None:
    _, upstream, admin = served
    upstream.answer, status, kind, code = case
    (created,) = create_rollouts(admin, prefix="unary")
    response = post(created, MESSAGES)
    error_of(response, status, kind, code)
    [call] = admin.calls(created.id)
    assert (call.kind, call.status, call.http_status, call.error_code) == ("messages", CallStatus.ERROR, status, code)
    assert call.error and call.response_raw == response.text and call.response_token_ids == []


def test_an_engine_that_does_not_answer_is_502_upstream_unavailable(served) -> None:
    _, _, admin = served
    (created,) = create_rollouts(admin, prefix="dead")
    error_of(post(created, {**MESSAGES, "model": "dead"}), 502, "api_error", "upstream_unavailable")
    [call] = admin.calls(created.id)
    assert (call.status, call.http_status) == (CallStatus.ERROR, 502) and "failed after 1 tries" in call.error
    assert call.error_code == CallErrorCode.UPSTREAM_UNAVAILABLE
    error_of(post(created, {**MESSAGES, "model": "dead", "stream": True}), 502, "api_error", "upstream_unavailable")


def stream_of(created, body: dict) -> tuple[httpx.Response, list[tuple[str, dict]]]:
    with httpx.stream("POST", created.base_url + "/messages", json={**body, "stream": True}, timeout=30,
                      headers={"x-api-key": created.api_key}) as response:
        raw = b"".join(response.iter_raw())
    events = []
    for block in raw.decode().split("\n\n")[:-1]:
        head, data = block.split("\n")
        events.append((head.removeprefix("event: "), orjson.loads(data.removeprefix("data: "))))
    return response, events


FIRST = {"id": "c1", "prompt_token_ids": [1, 2], "choices": [{"index": 0, "delta": {"content": "hel"},
                                                                "token_ids": [3]}]}
STREAMS = {
    "an undecodable chunk": (sse(FIRST, done=b"data: {not json\n\n"), CallErrorCode.UPSTREAM_PROTOCOL_ERROR),
    "an error chunk": (sse(FIRST, {"error": {"message": "engine overloaded", "type": "server_error"}}),
                       CallErrorCode.UPSTREAM_ERROR),
    "a tool call off the chat shapes": (sse(FIRST, {"choices": [{"index": 0, "delta": {"tool_calls": [
        {**tool_call("{}"), "function": {"name": "Bash", "arguments": 7}}]}, "token_ids": [4],
        "finish_reason": "tool_calls"}]}), CallErrorCode.UPSTREAM_PROTOCOL_ERROR),
    "a token id out of range": (sse(FIRST, {"choices": [{"index": 0, "delta": {"content": "x"},
                                                         "token_ids": [2**31]}]}),
                                CallErrorCode.UPSTREAM_PROTOCOL_ERROR),
}


@pytest.mark.parametrize(("chunks", "code"), STREAMS.values(), ids=STREAMS.keys())
def test_a_broken_stream_ends_with_an_error_event_and_no_message_stop(served, chunks: bytes, code) -> None:
    _, upstream, admin = served
    upstream.answer = Answer((chunks,), headers=SSE_HEADERS)
    (created,) = create_rollouts(admin, prefix="stream")
    response, events = stream_of(created, MESSAGES)
    names = [name for name, _ in events]
    assert response.status_code == 200 and names[:3] == ["message_start", "content_block_start",
                                                         "content_block_delta"]
    assert names[-1] == "error" and "message_stop" not in names and "message_delta" not in names
    assert events[-1][1]["error"]["type"] == "api_error"
    [call] = admin.calls(created.id)
    assert call.error_code == code
    assert call.status == CallStatus.ERROR and call.error and call.response_raw.endswith(
        "event: error\ndata: " + orjson.dumps(events[-1][1]).decode() + "\n\n")


def test_a_stream_the_engine_refuses_before_its_headers_keeps_its_status(served) -> None:
    _, upstream, admin = served
    upstream.answer = Answer((b'{"error": {"message": "max_tokens too large"}}',), status=400)
    (created,) = create_rollouts(admin, prefix="refused")
    response, _ = stream_of(created, MESSAGES)
    assert response.status_code == 400
    [call] = admin.calls(created.id)
    assert (call.status, call.http_status, call.error) == (CallStatus.ERROR, 400, "max_tokens too large")
    assert call.error_code == CallErrorCode.UPSTREAM_ERROR


def test_a_good_stream_is_recorded_with_the_engines_tokens_and_version(served) -> None:
    _, upstream, admin = served
    last = {"choices": [{"index": 0, "delta": {"content": "lo"}, "token_ids": [4], "finish_reason": "stop"}]}
    upstream.answer = Answer((sse(FIRST, last),), headers=(*SSE_HEADERS, ("x-policy-version", "9")))
    (created,) = create_rollouts(admin, prefix="good")
    response, events = stream_of(created, MESSAGES)
    assert response.headers["x-policy-version"] == "9" and events[-1][0] == "message_stop"
    [call] = admin.calls(created.id)
    assert (call.status, call.prompt_token_ids, call.response_token_ids, call.policy_version) == (
        CallStatus.OK, [1, 2], [3, 4], 9)
    assert call.response_text == "hello" and call.finish_reason == "stop"


def test_a_call_the_store_cannot_record_is_503_and_a_stream_ends_without_its_closing_events(served) -> None:
    gateway, upstream, admin = served
    (created,) = create_rollouts(admin, prefix="locked")
    holder = sqlite3.connect(gateway.db_path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # another connection holds the write lock: nothing can be recorded
    try:
        upstream.answer = Answer((orjson.dumps(GOOD),))
        response = post(created, MESSAGES)
        upstream.answer = Answer((sse(FIRST, {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),),
                                 headers=SSE_HEADERS)
        streamed, events = stream_of(created, MESSAGES)
    finally:
        holder.rollback()
        holder.close()
    error_of(response, 503, "overloaded_error", "store_unavailable")
    assert response.headers["retry-after"] == "1"
    assert streamed.status_code == 200 and events[-1][0] == "error" and "message_stop" not in [n for n, _ in events]
    assert events[-1][1]["error"]["type"] == "overloaded_error"
    assert admin.calls(created.id) == []
