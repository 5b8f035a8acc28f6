"""Who caused a failed call (issue 27, point 3). An answer the MODEL caused is the model's answer: delivered to the
harness in a form its protocol allows (200), recorded as an ok call with the engine's tokens and a `model_*` code,
never a 502, which the controller would count as the engine's failure and retry. The engine's own failures keep
their status and record their `CallErrorCode`, in chat as in the translated protocols. The engine is the hostile
upstream (answers byte for byte); the harnesses are the official `anthropic` and `openai` SDKs."""

from __future__ import annotations

import anthropic
import httpx
import openai
import orjson
import pytest

from gateway.client import GatewayClient
from gateway.records import CallErrorCode, CallStatus
from tests.gateway.api_support import create_rollouts
from tests.gateway.hostile_upstream import (
    IMPATIENT_TIMEOUT_S,
    NEVER_S,
    PATIENT_TIMEOUT_S,
    Answer,
    HostileUpstream,
    hostile_gateway,
)
from tests.gateway.support import ADMIN_TOKEN

SSE = (("content-type", "text/event-stream"),)
PROMPT, RESPONSE = [1, 2, 3], [40, 41, 42, 43]
ASK = [{"role": "user", "content": "list the files"}]
TOOLS = [{"name": "Bash", "description": "Run a command", "input_schema": {"type": "object"}}]
UNOBJECT_ARGUMENTS = ['{"command": "ls', '["ls", "-la"]', '"ls"']  # cut at max tokens, a list, a string


@pytest.fixture(scope="module")
def upstream():
    upstream = HostileUpstream().start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def served(tmp_path_factory, upstream):
    """A patient gateway in front of the hostile upstream (`hostile_gateway`), and its admin client."""
    with (hostile_gateway(tmp_path_factory.mktemp("model-answers"), upstream, PATIENT_TIMEOUT_S) as gateway,
          GatewayClient(gateway.url, ADMIN_TOKEN) as admin):
        yield upstream, admin


@pytest.fixture(scope="module")
def impatient(tmp_path_factory, upstream):
    """An impatient gateway in front of the same upstream, for the answers that outlast its timeout."""
    with (hostile_gateway(tmp_path_factory.mktemp("model-timeouts"), upstream, IMPATIENT_TIMEOUT_S) as gateway,
          GatewayClient(gateway.url, ADMIN_TOKEN) as admin):
        yield upstream, admin


def tool_call(index: int, name: str, arguments: str, call_id: str | None = None) -> dict:
    return {"index": index, "id": call_id or f"call_{index}", "type": "function",
            "function": {"name": name, "arguments": arguments}}


def unary(calls: list[dict], finish: str = "tool_calls") -> Answer:
    message = {"role": "assistant", "content": None, "tool_calls": [
        {k: v for k, v in call.items() if k != "index"} for call in calls]}
    return Answer((orjson.dumps({"id": "c1", "prompt_token_ids": PROMPT, "choices": [
        {"index": 0, "message": message, "token_ids": RESPONSE, "finish_reason": finish}]}),))


def stream(*deltas: dict, finish: str = "tool_calls") -> Answer:
    chunks = [{"id": "c1", "prompt_token_ids": PROMPT, "choices": [{"index": 0, "delta": {"role": "assistant"},
                                                                     "token_ids": []}]}]
    chunks += [{"choices": [{"index": 0, "delta": delta, "token_ids": [token]}]}
               for delta, token in zip(deltas, RESPONSE, strict=False)]
    chunks.append({"choices": [{"index": 0, "delta": {}, "token_ids": RESPONSE[len(deltas):],
                                "finish_reason": finish}]})
    return Answer((b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n",),
                  headers=SSE)


def messages_sdk(created) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=created.base_url.removesuffix("/v1"), api_key=created.api_key, max_retries=0)


def as_model_answer(admin: GatewayClient, rollout_id: str, kind: str, code: CallErrorCode | None):
    """The rollout's one call, checked as the model's answer: ok, 200, the engine's tokens and version, `code`."""
    [call] = admin.calls(rollout_id)
    assert (call.kind, call.status, call.http_status, call.error_code) == (kind, CallStatus.OK, 200, code)
    assert (call.prompt_token_ids, call.response_token_ids, call.policy_version) == (PROMPT, RESPONSE, 3)
    return call


@pytest.mark.parametrize("arguments", UNOBJECT_ARGUMENTS)
def test_messages_unary_tool_arguments_that_are_not_an_object_reach_the_harness_as_text(served, arguments) -> None:
    upstream, admin = served
    upstream.answer = unary([tool_call(0, "Bash", arguments)])
    (created,) = create_rollouts(admin, prefix="msg-unary")
    message = messages_sdk(created).messages.create(model="policy", max_tokens=64, messages=ASK, tools=TOOLS)
    assert [block.type for block in message.content] == ["text"] and message.stop_reason == "end_turn"
    assert orjson.loads(message.content[0].text) == {"name": "Bash", "arguments": arguments}
    call = as_model_answer(admin, created.id, "messages", CallErrorCode.MODEL_TOOL_ARGUMENTS)
    assert "not a JSON object" in call.error and orjson.loads(call.response_raw)["content"] == [
        block.model_dump(exclude_none=True) for block in message.content]


@pytest.mark.parametrize("arguments", UNOBJECT_ARGUMENTS)
def test_messages_stream_tool_arguments_that_are_not_an_object_reach_the_harness_as_text(served, arguments) -> None:
    upstream, admin = served
    upstream.answer = stream({"content": "Running it."}, {"tool_calls": [tool_call(0, "Bash", arguments[:3])]},
                             {"tool_calls": [{"index": 0, "function": {"arguments": arguments[3:]}}]})
    (created,) = create_rollouts(admin, prefix="msg-stream")
    with messages_sdk(created).messages.stream(model="policy", max_tokens=64, messages=ASK, tools=TOOLS) as events:
        message = events.get_final_message()
    assert [block.type for block in message.content] == ["text", "text"] and message.stop_reason == "end_turn"
    assert message.content[0].text == "Running it."
    assert orjson.loads(message.content[1].text) == {"name": "Bash", "arguments": arguments}
    call = as_model_answer(admin, created.id, "messages", CallErrorCode.MODEL_TOOL_ARGUMENTS)
    assert call.response_raw.endswith('event: message_stop\ndata: {"type":"message_stop"}\n\n')


def test_messages_a_good_call_beside_a_bad_one_stays_a_tool_use(served) -> None:
    upstream, admin = served
    upstream.answer = unary([tool_call(0, "Bash", '{"command": "ls"}'), tool_call(1, "Bash", "ls -la")])
    (created,) = create_rollouts(admin, prefix="msg-mixed")
    message = messages_sdk(created).messages.create(model="policy", max_tokens=64, messages=ASK, tools=TOOLS)
    assert [block.type for block in message.content] == ["tool_use", "text"] and message.stop_reason == "tool_use"
    assert message.content[0].input == {"command": "ls"}
    assert "tool call 1" in as_model_answer(admin, created.id, "messages", CallErrorCode.MODEL_TOOL_ARGUMENTS).error


def test_responses_stream_with_interleaved_parallel_calls_reaches_the_harness_whole(served) -> None:
    """Chat may interleave parallel tool calls' deltas by index: the harness gets both calls whole, not a broken
    stream."""
    upstream, admin = served
    upstream.answer = stream({"tool_calls": [tool_call(0, "run", '{"cmd"')]},
                             {"tool_calls": [tool_call(1, "run", '{"cmd": "b"}')]},
                             {"tool_calls": [{"index": 0, "function": {"arguments": ': "a"}'}}]})
    (created,) = create_rollouts(admin, prefix="resp-stream")
    client = openai.OpenAI(base_url=created.base_url, api_key=created.api_key, max_retries=0)
    events = list(client.responses.create(model="policy", input="go", stream=True))
    assert events[-1].type == "response.completed"
    assert [(item.call_id, item.arguments) for item in events[-1].response.output] == [
        ("call_0", '{"cmd": "a"}'), ("call_1", '{"cmd": "b"}')]
    as_model_answer(admin, created.id, "responses", None)


@pytest.mark.parametrize("arguments", UNOBJECT_ARGUMENTS)
def test_responses_unary_carries_any_arguments_as_the_string_they_are(served, arguments) -> None:
    upstream, admin = served
    upstream.answer = unary([tool_call(0, "run", arguments)])
    (created,) = create_rollouts(admin, prefix="resp-unary")
    client = openai.OpenAI(base_url=created.base_url, api_key=created.api_key, max_retries=0)
    [item] = client.responses.create(model="policy", input="go").output
    assert (item.type, item.name, item.arguments) == ("function_call", "run", arguments)
    as_model_answer(admin, created.id, "responses", None)


def post_chat(created, stream: bool = False, model: str = "policy") -> httpx.Response:
    return httpx.post(created.base_url + "/chat/completions", timeout=30, headers={
        "authorization": f"Bearer {created.api_key}"}, json={"model": model, "messages": ASK, "stream": stream})


ENGINE_FAILURES = {
    "the engine's 500": (Answer((b"Internal Server Error",), status=500), False, 502,
                         CallErrorCode.UPSTREAM_PROTOCOL_ERROR),
    "a 200 that is not JSON": (Answer((b"<html>",)), False, 502, CallErrorCode.UPSTREAM_PROTOCOL_ERROR),
    "a stream cut before its length": (Answer((b'data: {"choices": []}\n\n',), headers=(
        *SSE, ("content-length", "4000"))), True, 200, CallErrorCode.STREAM_BROKEN),
}
MODEL_SIDE = {
    "the context is full (400)": (Answer((b'{"error": {"message": "maximum context length is 8192 tokens"}}',),
                                         status=400), False, 400, CallErrorCode.UPSTREAM_ERROR),
    "the engine's error in a 200 body": (Answer((b'{"error": {"message": "prompt too long"}}',)), False, 200,
                                         CallErrorCode.UPSTREAM_ERROR),
}
TIMED_OUT = {  # behind the impatient gateway
    "an answer longer than the timeout": (Answer((b'{"id": "c1", ', b'"choices": []}'), pause_s=NEVER_S), False, 502,
                                          CallErrorCode.UPSTREAM_TIMEOUT),
    "a stream longer than the timeout": (Answer((b'data: {"choices": []}\n\n', b"data: [DONE]\n\n"), headers=SSE,
                                                pause_s=NEVER_S), True, 200, CallErrorCode.UPSTREAM_TIMEOUT),
}


@pytest.mark.parametrize(("answer", "streamed", "status", "code"), [*ENGINE_FAILURES.values(), *MODEL_SIDE.values()],
                         ids=[*ENGINE_FAILURES, *MODEL_SIDE])
def test_a_failed_chat_call_records_who_caused_it(served, answer, streamed, status, code) -> None:
    chat_fails_as(served, answer, streamed, status, code)


@pytest.mark.parametrize(("answer", "streamed", "status", "code"), TIMED_OUT.values(), ids=TIMED_OUT.keys())
def test_a_chat_answer_longer_than_the_timeout_is_recorded_upstream_timeout(impatient, answer, streamed, status,
                                                                            code) -> None:
    chat_fails_as(impatient, answer, streamed, status, code)


def chat_fails_as(served, answer: Answer, streamed: bool, status: int, code: CallErrorCode) -> None:
    """One chat call to `answer`: its HTTP status and the recorded call's status, HTTP status and error code."""
    upstream, admin = served
    upstream.answer = answer
    (created,) = create_rollouts(admin, prefix="chat-code")
    assert post_chat(created, streamed).status_code == status
    [call] = admin.calls(created.id)
    assert (call.status, call.http_status, call.error_code) == (CallStatus.ERROR, status, code), call.error


def test_an_engine_that_does_not_answer_is_recorded_upstream_unavailable(served) -> None:
    _, admin = served
    (created,) = create_rollouts(admin, prefix="chat-dead")
    response = post_chat(created, model="dead")
    assert response.status_code == 502 and response.json()["error"]["code"] == "upstream_unavailable"
    [call] = admin.calls(created.id)
    assert (call.http_status, call.error_code) == (502, CallErrorCode.UPSTREAM_UNAVAILABLE)


def test_a_messages_answer_longer_than_the_timeout_is_502_upstream_timeout(impatient) -> None:
    upstream, admin = impatient
    upstream.answer = Answer((b'{"id": "c1", ', b'"choices": []}'), pause_s=NEVER_S)
    (created,) = create_rollouts(admin, prefix="msg-timeout")
    with pytest.raises(anthropic.InternalServerError, match="upstream_timeout"):
        messages_sdk(created).messages.create(model="policy", max_tokens=64, messages=ASK)
    [call] = admin.calls(created.id)
    assert (call.http_status, call.error_code) == (502, CallErrorCode.UPSTREAM_TIMEOUT)
