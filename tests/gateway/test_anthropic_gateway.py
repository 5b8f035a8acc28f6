"""Anthropic Messages through the gateway (issue 13): the official `anthropic` SDK, streaming and not, with tool use
both ways, against the scripted upstream; the recorded call holds the harness's request, the answer exactly as the
harness saw it and the engine's token IDs; count_tokens; Anthropic's auth headers and error shape on every error."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import orjson
import pytest

from gateway.client import GatewayClient
from gateway.records import CallStatus, RolloutState
from gateway.scripted import Script
from tests.gateway.api_support import create_rollouts
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessScripted

if TYPE_CHECKING:  # the SDK (about 1.5 s of imports) is imported where used: collection is paid by every worker
    import anthropic

PROMPT_IDS, RESPONSE_IDS = list(range(1000, 1016)), list(range(5000, 5008))
TOOLS = [{"name": "Bash", "description": "Run a shell command",
          "input_schema": {"type": "object", "properties": {"step": {"type": "integer"}}}},
         {"name": "Read", "description": "Read a file", "input_schema": {"type": "object"}}]
ASK = [{"role": "user", "content": "fix the failing test"}]
MODEL = "claude-opus-5-5"  # any Claude name: the only registered model serves it


@pytest.fixture(scope="module")
def scripted():
    """The module's upstream: every chat answer is 8 tokens of text, then calls Bash and Read."""
    upstream = InProcessScripted(Script(prompt_tokens=16, response_tokens=8, policy_version=4,
                                        tool_calls=("Bash", "Read"))).start()
    yield upstream
    upstream.stop()


@pytest.fixture
def rollout(admin):
    (created,) = create_rollouts(admin, prefix="anthropic")
    return created


def sdk(created, **kwargs) -> anthropic.Anthropic:
    """The SDK pointed at the rollout (it appends /v1/messages), sending the key as x-api-key."""
    import anthropic

    return anthropic.Anthropic(base_url=created.base_url.removesuffix("/v1"), api_key=created.api_key,
                               max_retries=0, **kwargs)


def forwarded(scripted) -> tuple[str, dict]:
    path, body = scripted.upstream.last_request
    return path, orjson.loads(body)


def test_sdk_unary_with_tool_use_is_recorded_with_the_engines_tokens(admin, scripted, rollout) -> None:
    raw = sdk(rollout).messages.with_raw_response.create(model=MODEL, max_tokens=64, messages=ASK, tools=TOOLS,
                                                         system="You are a careful engineer.",
                                                         extra_body={"temperature": 0.7})
    message = raw.parse()
    assert [block.type for block in message.content] == ["text", "tool_use", "tool_use"]
    assert message.content[0].text == "t" * 8 and message.stop_reason == "tool_use"
    assert [(b.name, b.input) for b in message.content[1:]] == [("Bash", {"step": 0}), ("Read", {"step": 1})]
    assert message.model == MODEL and message.usage.input_tokens == 16 and message.usage.output_tokens == 8
    assert raw.headers["x-policy-version"] == "4"
    path, upstream = forwarded(scripted)
    assert path == "/v1/chat/completions" and upstream["model"] == "policy" and upstream["stream"] is False
    assert upstream["return_token_ids"] is True and upstream["logprobs"] is True  # train mode: as for chat
    assert upstream["messages"][0] == {"role": "system", "content": "You are a careful engineer."}
    assert [t["function"]["name"] for t in upstream["tools"]] == ["Bash", "Read"]
    assert upstream["temperature"] == 1.0  # train mode: the policy's sampling is enforced (gateway/sampling.py)
    [call] = admin.calls(rollout.id)
    assert call.sampling.requested == {"temperature": 0.7} and call.sampling.enforced
    assert (call.kind, call.stream, call.model, call.status, call.http_status) == ("messages", False, MODEL,
                                                                                   CallStatus.OK, 200)
    assert call.request == orjson.loads(raw.http_request.content)  # the harness's request as it sent it
    assert call.response_raw == raw.http_response.text  # the answer as the harness saw it
    assert call.response_id == message.id and message.id.startswith("msg_")
    assert (call.prompt_token_ids, call.response_token_ids) == (PROMPT_IDS, RESPONSE_IDS)
    assert len(call.response_logprobs) == 8 and call.policy_version == 4 and call.finish_reason == "tool_calls"


def test_sdk_stream_with_tool_use_is_recorded_as_the_events_sent(admin, scripted, rollout) -> None:
    with sdk(rollout).messages.stream(model=MODEL, max_tokens=64, messages=ASK, tools=TOOLS) as stream:
        kinds = [event.type for event in stream]
        message = stream.get_final_message()
    assert [block.type for block in message.content] == ["text", "tool_use", "tool_use"]
    assert [(b.id, b.name, b.input) for b in message.content[1:]] == [
        (message.id.replace("msg_", "toolu_") + "_0", "Bash", {"step": 0}),
        (message.id.replace("msg_", "toolu_") + "_1", "Read", {"step": 1})]
    assert message.stop_reason == "tool_use" and message.usage.output_tokens == 8
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert forwarded(scripted)[1]["stream"] is True
    [call] = admin.calls(rollout.id)
    assert (call.kind, call.stream, call.status, call.response_id) == ("messages", True, CallStatus.OK, message.id)
    assert (call.prompt_token_ids, call.response_token_ids) == (PROMPT_IDS, RESPONSE_IDS)
    assert len(call.response_logprobs) == 8 and call.policy_version == 4
    assert call.response_raw.startswith("event: message_start\n") and call.response_raw.endswith(
        'event: message_stop\ndata: {"type":"message_stop"}\n\n')


def test_the_raw_stream_is_what_is_recorded(admin, rollout) -> None:
    body = {"model": MODEL, "max_tokens": 64, "messages": ASK, "tools": TOOLS, "stream": True}
    with httpx.stream("POST", rollout.base_url + "/messages", json=body, timeout=30,
                      headers={"x-api-key": rollout.api_key, "anthropic-version": "2023-06-01"}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        received = b"".join(response.iter_raw())
    [call] = admin.calls(rollout.id)
    assert call.response_raw == received.decode()


def test_tool_results_go_back_as_tool_messages(admin, scripted, rollout) -> None:
    client = sdk(rollout)
    first = client.messages.create(model=MODEL, max_tokens=64, messages=ASK, tools=TOOLS)
    results = [{"type": "tool_result", "tool_use_id": block.id, "content": f"out {i}", "is_error": i == 1}
               for i, block in enumerate(first.content[1:])]
    turn = [*ASK, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
            {"role": "user", "content": results}]
    second = client.messages.create(model=MODEL, max_tokens=64, messages=turn, tools=TOOLS)
    assert second.stop_reason == "tool_use"
    messages = forwarded(scripted)[1]["messages"]
    ids = [block.id for block in first.content[1:]]
    assert messages[1] == {"role": "assistant", "content": "t" * 8, "tool_calls": [
        {"id": ids[0], "type": "function", "function": {"name": "Bash", "arguments": '{"step": 0}'}},
        {"id": ids[1], "type": "function", "function": {"name": "Read", "arguments": '{"step": 1}'}}]}
    assert messages[2:] == [{"role": "tool", "tool_call_id": ids[0], "content": "out 0"},
                            {"role": "tool", "tool_call_id": ids[1], "content": "Error: out 1"}]
    assert [c.seq for c in admin.calls(rollout.id)] == [0, 1]


def test_count_tokens_counts_with_the_engines_tokenizer_and_is_recorded(admin, scripted, rollout) -> None:
    counted = sdk(rollout).messages.count_tokens(model=MODEL, messages=ASK, tools=TOOLS, system="be brief")
    assert counted.input_tokens == 16
    path, body = forwarded(scripted)
    assert path == "/tokenize" and body["add_generation_prompt"] is True and body["model"] == "policy"
    assert body["messages"] == [{"role": "system", "content": "be brief"}, *ASK]
    assert [t["function"]["name"] for t in body["tools"]] == ["Bash", "Read"]
    [call] = admin.calls(rollout.id)
    assert (call.kind, call.status, call.prompt_token_ids, call.response_token_ids) == (
        "count_tokens", CallStatus.OK, PROMPT_IDS, [])
    assert orjson.loads(call.response_raw) == {"input_tokens": 16} and call.side is True


def test_bearer_and_anthropic_headers_are_accepted(admin, rollout) -> None:
    import anthropic

    client = anthropic.Anthropic(base_url=rollout.base_url.removesuffix("/v1"), auth_token=rollout.api_key,
                                 max_retries=0, default_headers={"anthropic-beta": "a-2025-01-01,b-2026-02-02",
                                                                 "anthropic-version": "2099-01-01"})
    message = client.messages.create(model="claude-haiku-4-5", max_tokens=8, messages=ASK)
    assert message.id.startswith("msg_") and message.model == "claude-haiku-4-5"


def anthropic_error(response: httpx.Response, status: int, kind: str) -> str:
    """The message of an error answer in Anthropic's exact shape, after checking its status and type."""
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert set(body) == {"type", "error"} and body["type"] == "error" and set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == kind, body
    return body["error"]["message"]


def post(created, path: str = "/messages", body: dict | None = None, key: str | None = "own",
         method: str = "POST") -> httpx.Response:
    headers = {} if key is None else {"x-api-key": created.api_key if key == "own" else key}
    return httpx.request(method, created.base_url + path, json=body, headers=headers, timeout=30)


GOOD = {"model": MODEL, "max_tokens": 8, "messages": ASK}


@pytest.mark.parametrize(("case", "path", "body", "key", "method", "status", "kind", "says"), [
    ("no key", "/messages", GOOD, None, "POST", 401, "authentication_error", "x-api-key"),
    ("forged key", "/messages", GOOD, "hrl.forged.0.mac", "POST", 401, "authentication_error", "invalid credential"),
    ("count_tokens without key", "/messages/count_tokens", GOOD, None, "POST", 401, "authentication_error", "key"),
    ("unknown path", "/messages/batches", GOOD, "own", "POST", 404, "not_found_error", "no route"),
    ("GET", "/messages", None, "own", "GET", 405, "invalid_request_error", "not allowed"),
    ("unknown field", "/messages", {**GOOD, "logit_bias": {}}, "own", "POST", 400, "invalid_request_error",
     "logit_bias"),
    ("image", "/messages", {**GOOD, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}]}]}, "own", "POST",
     400, "invalid_request_error", "messages[0].content[0]"),
    ("not JSON", "/messages", None, "own", "POST", 400, "invalid_request_error", "JSON"),
])
def test_errors_are_in_anthropics_shape(admin, rollout, case, path, body, key, method, status, kind, says) -> None:
    message = anthropic_error(post(rollout, path, body, key, method), status, kind)
    assert says in message
    assert admin.calls(rollout.id) == []  # refused before anything was recorded


def test_another_rollouts_key_is_403_and_a_finished_rollout_409(admin, gateway) -> None:
    first, second = create_rollouts(admin, 2, prefix="anthropic-keys")
    assert "another rollout" in anthropic_error(post(first, body=GOOD, key=second.api_key), 403, "permission_error")
    admin.set_state(first.id, RolloutState.RUNNING)
    admin.set_state(first.id, RolloutState.SUCCEEDED)
    message = anthropic_error(post(first, body=GOOD), 409, "invalid_request_error")
    assert "rollout_finished" in message


def test_the_sdk_raises_its_own_errors(rollout) -> None:
    import anthropic

    with pytest.raises(anthropic.BadRequestError) as refused:
        sdk(rollout).messages.create(model=MODEL, max_tokens=8, messages=ASK, extra_body={"top_k": "many"})
    assert refused.value.body["error"]["type"] == "invalid_request_error" and "top_k" in str(refused.value)
    unauthorized = anthropic.Anthropic(base_url=rollout.base_url.removesuffix("/v1"), api_key="wrong",
                                       max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        unauthorized.messages.create(model=MODEL, max_tokens=8, messages=ASK)


def test_a_model_no_one_serves_is_404_in_anthropics_shape(tmp_path, scripted) -> None:
    from tests.inprocess import InProcessGateway

    gateway = InProcessGateway(db_path=tmp_path / "two.db").start()
    try:
        with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
            admin.register_model("a", scripted.base_url)
            admin.register_model("b", scripted.base_url)
            (created,) = create_rollouts(admin)
            message = anthropic_error(post(created, body=GOOD), 404, "not_found_error")
    finally:
        gateway.stop()
    assert MODEL in message


def test_the_sdk_lists_the_models_in_anthropics_shape(rollout) -> None:
    page = sdk(rollout).models.list()
    assert [(model.id, model.type) for model in page.data] == [("policy", "model")] and page.has_more is False
    openai_shaped = httpx.get(rollout.base_url + "/models", headers={"authorization": f"Bearer {rollout.api_key}"})
    assert openai_shaped.json()["object"] == "list"  # without anthropic-version: OpenAI's list, as before
