"""The `anthropic` SDK through the gateway in front of the real embedded engine with the `tiny` model (slow tier, via
the `engine_url` integration fixture): the recorded token IDs are the engine's, the prompt IDs decode to the chat the
Messages request translates to (tools and tool results rendered by the engine's template), the response IDs to the
text the harness got, streamed or not; count_tokens counts exactly that prompt."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from engines.serving.chat_template import render_chat
from gateway.client import GatewayClient
from gateway.protocols.anthropic import ADAPTER
from gateway.records import CallStatus
from tests.gateway.api_support import create_rollouts
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway

if TYPE_CHECKING:  # anthropic and transformers are imported where used: collection is paid by every worker
    import anthropic

TOOLS = [{"name": "Bash", "description": "Run a shell command", "input_schema": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}]
CONVERSATION = [
    {"role": "user", "content": "List the files."},
    {"role": "assistant", "content": [{"type": "text", "text": "Listing."},
                                      {"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                       "input": {"command": "ls"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py b.py"}]},
]
REQUEST = {"model": "claude-opus-5-5", "max_tokens": 6, "system": "You are terse.", "messages": CONVERSATION,
           "tools": TOOLS}


@pytest.fixture(scope="module")
def admin(tmp_path_factory, engine_url):
    gateway = InProcessGateway(tmp_path_factory.mktemp("gw-anthropic-engine") / "store.db").start()
    with GatewayClient(gateway.url, ADMIN_TOKEN) as client:
        client.register_model("tiny", engine_url + "/v1")
        yield client
    gateway.stop()


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def sdk(created) -> anthropic.Anthropic:
    import anthropic

    return anthropic.Anthropic(base_url=created.base_url.removesuffix("/v1"), api_key=created.api_key, max_retries=0)


def rendered_prompt(tokenizer) -> str:
    chat = ADAPTER.to_chat(REQUEST, [])
    rendered = render_chat(tokenizer, chat["messages"], chat["tools"])
    assert "<tool_response>\na.py b.py\n</tool_response>" in rendered.text  # the tool result reached the prompt
    assert '"name": "Bash", "arguments": {"command": "ls"}' in rendered.text  # and the earlier call
    return rendered.text


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_recorded_tokens_are_the_engines_and_decode_to_the_rendered_prompt(admin, tokenizer, stream: bool) -> None:
    (created,) = create_rollouts(admin, prefix="anthropic-engine")
    client = sdk(created)
    if stream:
        with client.messages.stream(**REQUEST, extra_body={"temperature": 1.0}) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**REQUEST, extra_body={"temperature": 1.0})
    [call] = admin.calls(created.id)
    assert (call.kind, call.stream, call.status, call.response_id) == ("messages", stream, CallStatus.OK, message.id)
    prompt = rendered_prompt(tokenizer)
    assert tokenizer.decode(call.prompt_token_ids) == prompt
    assert call.prompt_token_ids == tokenizer(prompt, add_special_tokens=False)["input_ids"]
    text = "".join(block.text for block in message.content if block.type == "text")
    assert text == call.response_text == tokenizer.decode(call.response_token_ids, skip_special_tokens=True)
    assert len(call.response_token_ids) == message.usage.output_tokens <= 6
    assert len(call.response_logprobs) == len(call.response_token_ids) and call.policy_version == 0
    assert message.usage.input_tokens == len(call.prompt_token_ids)
    assert message.stop_reason in ("max_tokens", "end_turn", "tool_use")


def test_count_tokens_is_the_prompt_the_engine_sees(admin, tokenizer) -> None:
    (created,) = create_rollouts(admin, prefix="anthropic-count")
    request = {key: value for key, value in REQUEST.items() if key != "max_tokens"}
    counted = sdk(created).messages.count_tokens(**request)
    [call] = admin.calls(created.id)
    assert counted.input_tokens == len(call.prompt_token_ids) == len(tokenizer(
        rendered_prompt(tokenizer), add_special_tokens=False)["input_ids"])
    assert call.kind == "count_tokens" and call.response_token_ids == []
