"""How a failing engine reaches a Responses harness: before the answer began, an OpenAI-shaped error with the HTTP
status (502 for a broken answer or an engine 5xx); once a stream began, an `error` event then `response.failed`.
Every failure is recorded as an error call. The engine is the hostile upstream (answers byte for byte)."""

from __future__ import annotations

import httpx
import openai
import orjson
import pytest

from gateway.client import GatewayClient
from tests.gateway.api_support import create_rollouts, error_of
from tests.gateway.hostile_upstream import Answer, HostileUpstream
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway

SSE = (("content-type", "text/event-stream"),)
FIRST = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "prompt_token_ids": [1, 2],
         "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "token_ids": [7],
                      "finish_reason": None}]}


@pytest.fixture(scope="module")
def hostile():
    upstream = HostileUpstream().start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def admin(tmp_path_factory, hostile):
    gw = InProcessGateway(db_url=f"sqlite:///{tmp_path_factory.mktemp('gw') / 'store.db'}").start()
    with GatewayClient(gw.url, ADMIN_TOKEN) as client:
        client.register_model("policy", hostile.base_url, version=1)
        yield client
    gw.stop()


@pytest.fixture
def rollout(admin):
    (created,) = create_rollouts(admin)
    return created


def post(created, body: dict) -> httpx.Response:
    return httpx.post(created.base_url + "/responses", json=body, timeout=30,
                      headers={"authorization": f"Bearer {created.api_key}"})


@pytest.mark.parametrize(("answer", "code"), [
    (Answer((b'{"error": {"message": "boom"}}',), status=500), "upstream_protocol_error"),
    (Answer((b'{"choices": [1]}',)), "upstream_protocol_error"),
], ids=["engine-5xx", "broken-answer"])
def test_a_failed_unary_call_is_an_openai_error_and_recorded(hostile, admin, rollout, answer, code):
    hostile.answer = answer
    error = error_of(post(rollout, {"model": "policy", "input": "hi"}), 502)
    assert error["code"] == code and error["type"] == "upstream_error"
    [call] = admin.calls(rollout.id)
    assert call.kind == "responses" and call.status == "error" and call.http_status == 502
    assert orjson.loads(call.response_raw) == {"error": error}


def test_an_engine_refusal_keeps_its_status_in_openai_shape(hostile, admin, rollout):
    hostile.answer = Answer((b'{"error": {"message": "max_tokens is too large", "type": "BadRequestError"}}',),
                            status=400)
    client = openai.OpenAI(base_url=rollout.base_url, api_key=rollout.api_key, max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="policy", input="hi", max_output_tokens=10**6)
    assert "max_tokens is too large" in caught.value.body["message"]


def test_a_stream_broken_midway_ends_with_error_then_response_failed(hostile, admin, rollout):
    hostile.answer = Answer((b"data: " + orjson.dumps(FIRST) + b"\n\n", b"data: {not json\n\n"), headers=SSE)
    client = openai.OpenAI(base_url=rollout.base_url, api_key=rollout.api_key, max_retries=0)
    events = list(client.responses.create(model="policy", input="hi", stream=True))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"] and "response.output_text.delta" in types
    assert types[-2:] == ["error", "response.failed"]
    assert events[-1].response.status == "failed" and events[-1].response.output[0].content[0].text == "Hel"
    [call] = admin.calls(rollout.id)
    assert call.status == "error" and call.stream and "response.failed" in call.response_raw
