"""Rendering of tools and tool messages: the fallback ChatML + Hermes template, and the model's template when it has
tools (in-memory Hugging Face tokenizers: no model files, fast tier)."""

from __future__ import annotations

import re

import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

from engines.serving.chat_template import (
    ChatTemplateError,
    involves_tools,
    model_template_has_tools,
    normalise_messages,
    render_chat,
    template_uses_tools,
)

SMOLLM_LIKE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
               "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
               "{% endif %}")
WITH_TOOLS = ("{% if tools %}TOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}\n{% endif %}"
              "{% for m in messages %}[{{ m.role }}]{{ m.content }}"
              "{% for c in m.tool_calls or [] %}<call {{ c.function.name }} {{ c.function.arguments.a }}>{% endfor %}"
              "\n{% endfor %}")
TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two numbers",
                                           "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}]
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Add "}, {"type": "text", "text": "1 and 2"}]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}},
        {"id": "call_2", "type": "function", "function": {"name": "add", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "3"},
    {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "0"}]},
]
EXPECTED_FALLBACK = (
    "<|im_start|>system\nBe brief.\n\n# Tools\n\n"
    "You can call the functions whose signatures are listed as JSON inside <tools></tools>:\n<tools>\n"
    '{"type": "function", "function": {"name": "add", "description": "Add two numbers", "parameters": '
    '{"type": "object", "properties": {"a": {"type": "integer"}}}}}\n</tools>\n\n'
    "To call functions, answer with one block per call, each holding a JSON object:\n"
    '<tool_call>\n{"name": <function name>, "arguments": <arguments as a JSON object>}\n</tool_call><|im_end|>\n'
    "<|im_start|>user\nAdd \n1 and 2<|im_end|>\n"
    '<|im_start|>assistant\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n'
    '<tool_call>\n{"name": "add", "arguments": {}}\n</tool_call><|im_end|>\n'
    "<|im_start|>user\n<tool_response>\n3\n</tool_response>\n<tool_response>\n0\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n")


def tokenizer(template: str, chatml: bool = True) -> PreTrainedTokenizerFast:
    vocab = {"[UNK]": 0, **({"<|im_start|>": 1, "<|im_end|>": 2} if chatml else {})}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="[UNK]")))
    tok.chat_template = template
    return tok


def test_a_template_without_tools_gets_the_fallback_for_tools_and_tool_messages() -> None:
    rendered = render_chat(tokenizer(SMOLLM_LIKE), CONVERSATION, TOOLS)
    assert rendered.template == "fallback"
    assert rendered.text == EXPECTED_FALLBACK


def test_fallback_without_a_system_message_puts_only_the_tools_in_the_system_turn() -> None:
    rendered = render_chat(tokenizer(SMOLLM_LIKE), [{"role": "user", "content": "hi"}], TOOLS,
                           add_generation_prompt=False)
    assert rendered.text.startswith("<|im_start|>system\n# Tools\n\n")
    assert rendered.text.endswith("</tool_call><|im_end|>\n<|im_start|>user\nhi<|im_end|>\n")


def test_assistant_content_before_calls_and_tool_messages_without_tools_use_the_fallback() -> None:
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "content": "Adding.", "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "add", "arguments": '{"a": 5}'}}]},
                {"role": "tool", "tool_call_id": "c", "content": "5"}]
    rendered = render_chat(tokenizer(SMOLLM_LIKE), messages, None, add_generation_prompt=False)
    assert rendered.template == "fallback"
    assert rendered.text == ('<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\nAdding.\n<tool_call>\n'
                             '{"name": "add", "arguments": {"a": 5}}\n</tool_call><|im_end|>\n'
                             "<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n")


def test_requests_without_tools_keep_the_models_template() -> None:
    tok = tokenizer(SMOLLM_LIKE)
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "there"}]}]
    rendered = render_chat(tok, messages, None)
    assert rendered.template == "model"
    assert rendered.text == "<|im_start|>user\nhi\nthere<|im_end|>\n<|im_start|>assistant\n"  # joined as vLLM does


def test_a_template_with_tools_is_preferred_and_gets_arguments_as_objects() -> None:
    tok = tokenizer(WITH_TOOLS)
    assert model_template_has_tools(tok)
    rendered = render_chat(tok, CONVERSATION[1:3], TOOLS, add_generation_prompt=False)
    assert rendered.template == "model"
    assert rendered.text == "TOOLS:add;[user]Add \n1 and 2[assistant]<call add 1><call add >"  # trim_blocks


def test_template_tool_detection() -> None:
    assert not template_uses_tools(SMOLLM_LIKE)
    assert template_uses_tools(WITH_TOOLS)
    assert template_uses_tools("{% generation %}{{ tools }}{% endgeneration %}")  # unknown tag: by the word
    assert model_template_has_tools(tokenizer({"default": SMOLLM_LIKE, "tool_use": WITH_TOOLS}))
    assert not model_template_has_tools(tokenizer({"default": SMOLLM_LIKE}))


def test_involves_tools() -> None:
    assert not involves_tools([{"role": "user", "content": "x"}], None)
    assert not involves_tools([{"role": "user", "content": "x"}], [])
    assert involves_tools([{"role": "user", "content": "x"}], TOOLS)
    assert involves_tools([{"role": "tool", "content": "x"}], None)


def test_normalise_keeps_arguments_that_are_not_a_json_object_as_sent() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "not json"}}
    [message] = normalise_messages([{"role": "assistant", "content": None, "tool_calls": [call]}])
    assert message["content"] == "" and message["tool_calls"][0]["function"]["arguments"] == "not json"


@pytest.mark.parametrize("messages, fragment", [
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}], "text parts only"),
    ([{"role": "user", "content": 5}], "messages[0].content is int"),
    ([{"role": "assistant", "content": "", "tool_calls": [{"id": "c"}]}], "each call needs"),
])
def test_unrenderable_messages_name_the_problem(messages, fragment) -> None:
    with pytest.raises(ChatTemplateError, match=re.escape(fragment)):
        render_chat(tokenizer(SMOLLM_LIKE), messages, TOOLS)


def test_fallback_needs_chatml_tokens() -> None:
    with pytest.raises(ChatTemplateError, match="needs tokens"):
        render_chat(tokenizer(SMOLLM_LIKE, chatml=False), [{"role": "user", "content": "x"}], TOOLS)


def test_a_template_error_is_a_chat_template_error() -> None:
    with pytest.raises(ChatTemplateError, match="could not render"):
        render_chat(tokenizer("{{ raise_exception('no system role') }}"), [{"role": "user", "content": "x"}], None)
