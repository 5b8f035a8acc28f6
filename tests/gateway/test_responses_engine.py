"""The openai SDK's Responses calls through the gateway in front of the real embedded engine (tiny model): the
recorded prompt token IDs are the engine's and decode to the prompt its chat template renders for the translated
conversation (tools and tool results included), and the response token IDs decode to what the harness received.
Integration tier (the engine process and the tiny model's weights)."""

from __future__ import annotations

import openai
import pytest
from transformers import AutoTokenizer

from engines.serving.chat_template import render_chat
from gateway.client import GatewayClient
from gateway.records import CallStatus, RolloutSpec
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway

TOOL = {"type": "function", "name": "read_file", "description": "Read one file of the repository.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}
CHAT_TOOL = {"type": "function", "function": {k: v for k, v in TOOL.items() if k != "type"}}
INPUT = [{"role": "user", "content": "What is in a.py?"},
         {"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": '{"path": "a.py"}'},
         {"type": "function_call_output", "call_id": "call_1", "output": "x = 1"}]
RENDERED_AS = [{"role": "system", "content": "You read code."}, {"role": "user", "content": "What is in a.py?"},
               {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
                   "name": "read_file", "arguments": '{"path": "a.py"}'}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "x = 1"}]


@pytest.fixture(scope="module")
def admin(tmp_path_factory, engine_url):
    gw = InProcessGateway(tmp_path_factory.mktemp("gw-responses") / "store.db").start()
    with GatewayClient(gw.url, ADMIN_TOKEN) as client:
        client.register_model("tiny", engine_url + "/v1")
        yield client
    gw.stop()


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_responses_record_the_engines_tokens_of_the_rendered_conversation(admin, tokenizer, stream):
    rollout_id = f"responses-engine-{stream}"
    created = admin.create_rollouts([RolloutSpec(id=rollout_id, group_id="g")])[0]
    client = openai.OpenAI(base_url=created.base_url, api_key=created.api_key, max_retries=0, timeout=120)
    request = {"model": "tiny", "instructions": "You read code.", "input": INPUT, "tools": [TOOL],
               "max_output_tokens": 12, "temperature": 1.0, "store": False}
    if stream:
        response = [event for event in client.responses.create(**request, stream=True)][-1].response
    else:
        response = client.responses.create(**request)
    [call] = admin.calls(rollout_id)
    assert call.status == CallStatus.OK and call.kind == "responses" and call.stream == stream
    assert call.response_id == response.id and call.request == request | ({"stream": True} if stream else {})
    rendered = render_chat(tokenizer, RENDERED_AS, [CHAT_TOOL]).text
    assert tokenizer.decode(call.prompt_token_ids) == rendered
    assert "read_file" in rendered and "x = 1" in rendered
    assert response.usage.input_tokens == len(call.prompt_token_ids)
    assert response.usage.output_tokens == len(call.response_token_ids) == len(call.response_logprobs)
    assert 0 < len(call.response_token_ids) <= 12
    if not any(item.type == "function_call" for item in response.output):  # a random model rarely calls a tool
        assert tokenizer.decode(call.response_token_ids, skip_special_tokens=True) == response.output_text
    assert response.status == ("incomplete" if call.finish_reason == "length" else "completed")
    assert call.policy_version == 0


READ_A = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}
CHAT_MESSAGES = [{"role": "system", "content": "You read code."}, {"role": "user", "content": "What is in a.py?"},
                 {"role": "assistant", "content": None, "tool_calls": [READ_A]},
                 {"role": "tool", "tool_call_id": "call_1", "content": "x = 1"}]


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_chat_with_tools_records_the_engines_tokens_of_the_rendered_conversation(admin, tokenizer, stream):
    """The openai SDK's chat completions with a tool, a tool call and its result, passed through as they are."""
    rollout_id = f"chat-tools-engine-{stream}"
    created = admin.create_rollouts([RolloutSpec(id=rollout_id, group_id="g")])[0]
    client = openai.OpenAI(base_url=created.base_url, api_key=created.api_key, max_retries=0, timeout=120)
    request = {"model": "tiny", "messages": CHAT_MESSAGES, "tools": [CHAT_TOOL], "max_tokens": 12}
    if stream:
        chunks = list(client.chat.completions.create(**request, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        called = any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    else:
        message = client.chat.completions.create(**request).choices[0].message
        text, called = message.content or "", bool(message.tool_calls)
    [call] = admin.calls(rollout_id)
    assert call.status == CallStatus.OK and call.kind == "chat" and call.stream == stream
    rendered = render_chat(tokenizer, CHAT_MESSAGES, [CHAT_TOOL]).text
    assert tokenizer.decode(call.prompt_token_ids) == rendered and "<tool_call>" in rendered
    assert 0 < len(call.response_token_ids) == len(call.response_logprobs) <= 12
    if not called:  # a random model rarely calls a tool
        assert tokenizer.decode(call.response_token_ids, skip_special_tokens=True) == text
