"""Tools, tool messages, n choices and /tokenize through the real engine server with the `tiny` model (slow tier).

The tiny model's random weights never write a tool call, so parsing itself is tested on the response builders
(test_chat_stream.py); here: the prompt is the fallback rendering, every choice comes back with its tokens, the
parse-failure field and counter are there, and /tokenize counts what a chat call's prompt holds.
"""

from __future__ import annotations

import httpx

from engines.serving.chat_template import render_chat

TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two integers",
                                           "parameters": {"type": "object",
                                                          "properties": {"a": {"type": "integer"},
                                                                         "b": {"type": "integer"}}}}}]
MESSAGES = [
    {"role": "user", "content": [{"type": "text", "text": "What is 1 + 2?"}]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "3"},
]


def chat(client, **kwargs):
    return client.chat.completions.create(model="tiny", messages=kwargs.pop("messages", MESSAGES),
                                          extra_body={"return_token_ids": True}, **kwargs)


def test_tools_and_tool_messages_are_rendered_with_the_fallback_template(client, tokenizer) -> None:
    response = chat(client, tools=TOOLS, max_tokens=4, temperature=0)
    prompt_ids = response.model_extra["prompt_token_ids"]
    rendered = render_chat(tokenizer, MESSAGES, TOOLS)
    assert rendered.template == "fallback"
    assert tokenizer.decode(prompt_ids) == rendered.text
    assert prompt_ids == tokenizer(rendered.text, add_special_tokens=False)["input_ids"]
    assert '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>' in rendered.text
    assert "<|im_start|>user\n<tool_response>\n3\n</tool_response><|im_end|>\n<|im_start|>assistant\n" in rendered.text
    assert response.choices[0].model_extra["tool_call_parse_failures"] == 0


def test_tool_choice_none_leaves_the_text_unparsed(client) -> None:
    response = chat(client, tools=TOOLS, tool_choice="none", max_tokens=4, temperature=0)
    assert "tool_call_parse_failures" not in response.choices[0].model_extra
    assert response.choices[0].message.tool_calls in (None, [])


def test_n_choices_each_come_back_with_their_tokens(client, tokenizer) -> None:
    response = chat(client, tools=TOOLS, n=2, max_tokens=5, temperature=1.0, seed=7, logprobs=True)
    assert [c.index for c in response.choices] == [0, 1]
    token_ids = [c.model_extra["token_ids"] for c in response.choices]
    assert all(len(ids) == 5 for ids in token_ids) and token_ids[0] != token_ids[1]
    assert [len(c.logprobs.content) for c in response.choices] == [5, 5]
    assert response.usage.completion_tokens == 10
    streamed: dict[int, list[int]] = {0: [], 1: []}
    stream = chat(client, tools=TOOLS, n=2, max_tokens=5, temperature=1.0, seed=7, stream=True)
    for chunk in stream:
        for choice in chunk.choices:
            streamed[choice.index] += (choice.model_extra or {}).get("token_ids") or []
    assert [streamed[0], streamed[1]] == token_ids


def test_tokenize_counts_the_chat_prompt_and_the_text_prompt(client, engine_url: str) -> None:
    response = chat(client, tools=TOOLS, max_tokens=1, temperature=0)
    answer = httpx.post(f"{engine_url}/tokenize", json={"model": "tiny", "messages": MESSAGES, "tools": TOOLS},
                        timeout=30).json()
    assert answer["tokens"] == response.model_extra["prompt_token_ids"]
    assert answer["count"] == response.usage.prompt_tokens and answer["max_model_len"] > answer["count"]
    completion = client.completions.create(model="tiny", prompt="Hello there", max_tokens=1)
    text = httpx.post(f"{engine_url}/tokenize", json={"prompt": "Hello there"}, timeout=30).json()
    assert text["count"] == completion.usage.prompt_tokens


def test_tokenize_refuses_bad_requests(engine_url: str) -> None:
    both = httpx.post(f"{engine_url}/tokenize", json={"prompt": "x", "messages": MESSAGES}, timeout=30)
    assert both.status_code == 400 and "exactly one" in both.json()["error"]["message"]
    other = httpx.post(f"{engine_url}/tokenize", json={"model": "nope", "prompt": "x"}, timeout=30)
    assert other.status_code == 404


def test_health_reports_the_parse_failure_counter(engine_url: str) -> None:
    health = httpx.get(f"{engine_url}/health", timeout=30).json()
    assert isinstance(health["tool_call_parse_failures"], int)
