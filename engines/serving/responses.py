"""Response bodies and stream chunks in vLLM's OpenAI-compatible shapes, built from scheduler token events."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engines.serving.scheduler import TokenEvent
from engines.serving.tool_choice import ToolChoice, answer_finish_reason
from engines.serving.tool_parser import ParsedOutput

TokenText = Callable[[int], str]
PARSE_FAILURES_FIELD = "tool_call_parse_failures"
"""Extra field of a chat choice (and of a streamed choice's last chunk) when tool calls are parsed: blocks that
could not be parsed and were left in the content as text."""
FORCED_TOKENS_FIELD = "tool_choice_forced_tokens"
"""Extra top-level field of a chat answer (of a stream's first chunks) whose `tool_choice` forced a call: how many
tokens at the end of `prompt_token_ids` the engine forced (the call's opening; not sampled)."""
CONSTRAINED_TOKENS_FIELD = "tool_choice_constrained_tokens"
"""Extra field of a forced answer's choice (of a streamed choice's last chunk): its first response tokens drawn under
the function-name constraint, each reported with a null logprob."""
AUTO = ToolChoice("auto", (), True)


def new_id(prefix: str) -> str:
    """A fresh response id such as chatcmpl-3f2a..."""
    return f"{prefix}-{uuid.uuid4().hex}"


@dataclass
class ChoiceLog:
    """Everything one choice produced, accumulated from its token events."""

    token_ids: list[int] = field(default_factory=list)
    """Sampled token ids, end-of-sequence included."""
    text: str = ""
    """Visible text."""
    events: list[TokenEvent] = field(default_factory=list)
    """Token events, for logprobs."""
    finish_reason: str | None = None
    """'stop' or 'length' once finished."""
    stop_reason: str | int | None = None
    """Matched stop string or stop token id."""
    constrained_tokens: int = 0
    """Tokens drawn under a prefix constraint (their logprob is NaN)."""

    def add(self, event: TokenEvent) -> None:
        """Accumulates one token event."""
        self.token_ids.append(event.token_id)
        self.constrained_tokens += event.constrained
        self.text += event.text_delta
        self.events.append(event)
        self.finish_reason, self.stop_reason = event.finish_reason, event.stop_reason


def _token_entry(token_text: TokenText, token_id: int, logprob: float) -> dict[str, Any]:
    text = token_text(token_id)
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8", errors="replace"))}


def chat_logprobs(events: list[TokenEvent], token_text: TokenText) -> dict[str, Any]:
    """`choices[i].logprobs` of a chat completion: {content: [{token, logprob, bytes, top_logprobs}]}."""
    content = []
    for event in events:
        entry = _token_entry(token_text, event.token_id, event.logprob)
        entry["top_logprobs"] = [_token_entry(token_text, tid, lp) for tid, lp in event.top]
        content.append(entry)
    return {"content": content}


def completion_logprobs(events: list[TokenEvent], token_text: TokenText, start_offset: int) -> dict[str, Any]:
    """`choices[i].logprobs` of a text completion: {tokens, token_logprobs, top_logprobs, text_offset}."""
    tokens, offsets, tops = [], [], []
    offset = start_offset
    for event in events:
        text = token_text(event.token_id)
        tokens.append(text)
        offsets.append(offset)
        offset += len(text)
        top = {token_text(tid): lp for tid, lp in event.top}
        top.setdefault(text, event.logprob)
        tops.append(top)
    return {"tokens": tokens, "token_logprobs": [e.logprob for e in events], "top_logprobs": tops,
            "text_offset": offsets}


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """The usage object."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


@dataclass(frozen=True)
class ResponseMeta:
    """Fields every body and chunk of one response shares."""

    response_id: str
    """id field."""
    model: str
    """Served model name."""
    policy_version: int
    """Version of the weights that produced the response."""
    created: int = field(default_factory=lambda: int(time.time()))
    """Unix time of the request."""

    def envelope(self, obj: str) -> dict[str, Any]:
        """The top-level fields with `object` set."""
        return {"id": self.response_id, "object": obj, "created": self.created, "model": self.model,
                "policy_version": self.policy_version}


def chat_choice(index: int, choice: ChoiceLog, parsed: ParsedOutput | None, token_text: TokenText,
                with_logprobs: bool, with_token_ids: bool, tool_choice: ToolChoice = AUTO) -> dict[str, Any]:
    """One choice of a chat.completion; with `parsed`, its tool calls and the content outside them (token ids and
    logprobs stay the sampled tokens; a forced call's opening is in the prompt)."""
    message: dict[str, Any] = {"role": "assistant", "content": choice.text, "tool_calls": [],
                               "reasoning_content": None}
    finish_reason = choice.finish_reason
    extra: dict[str, Any] = {}
    if parsed is not None:
        message["content"] = parsed.content
        message["tool_calls"] = [call.openai() for call in parsed.tool_calls]
        finish_reason = answer_finish_reason(tool_choice, finish_reason, bool(parsed.tool_calls))
        extra[PARSE_FAILURES_FIELD] = parsed.parse_failures
    if tool_choice.forces_call:
        extra[CONSTRAINED_TOKENS_FIELD] = choice.constrained_tokens
    return {
        "index": index, "message": message,
        "logprobs": chat_logprobs(choice.events, token_text) if with_logprobs else None,
        "finish_reason": finish_reason, "stop_reason": choice.stop_reason,
        **({"token_ids": choice.token_ids} if with_token_ids else {}), **extra,
    }


def chat_body(meta: ResponseMeta, choices: list[ChoiceLog], prompt_ids: list[int], token_text: TokenText,
              with_logprobs: bool, with_token_ids: bool, parsed: list[ParsedOutput] | None = None,
              tool_choice: ToolChoice = AUTO, forced_tokens: int = 0) -> dict[str, Any]:
    """A complete chat.completion body; `parsed` (one per choice) when tool calls are parsed; `forced_tokens` of
    `prompt_ids` when `tool_choice` forced a call."""
    body = meta.envelope("chat.completion")
    body["choices"] = [chat_choice(i, c, parsed[i] if parsed is not None else None, token_text, with_logprobs,
                                   with_token_ids, tool_choice) for i, c in enumerate(choices)]
    body["usage"] = usage(len(prompt_ids), sum(len(c.token_ids) for c in choices))
    body["prompt_token_ids"] = prompt_ids if with_token_ids else None
    if tool_choice.forces_call:
        body[FORCED_TOKENS_FIELD] = forced_tokens
    return body


def completion_body(meta: ResponseMeta, choices: list[ChoiceLog], prompts_ids: list[list[int]], n: int,
                    token_text: TokenText, with_logprobs: bool, with_token_ids: bool) -> dict[str, Any]:
    """A complete text_completion body; choice i belongs to prompt i // n."""
    body = meta.envelope("text_completion")
    body["choices"] = [{
        "index": i, "text": c.text,
        "logprobs": completion_logprobs(c.events, token_text, 0) if with_logprobs else None,
        "finish_reason": c.finish_reason, "stop_reason": c.stop_reason,
        **({"prompt_token_ids": prompts_ids[i // n], "token_ids": c.token_ids} if with_token_ids else {}),
    } for i, c in enumerate(choices)]
    body["usage"] = usage(sum(len(p) for p in prompts_ids), sum(len(c.token_ids) for c in choices))
    return body


def chat_role_chunk(meta: ResponseMeta, index: int, prompt_ids: list[int] | None,
                    forced_tokens: int | None = None) -> dict[str, Any]:
    """The first chunk of a streamed chat choice: role assistant, empty content (+ prompt token ids, + how many of
    them a forced tool call added)."""
    chunk = meta.envelope("chat.completion.chunk")
    chunk["choices"] = [{"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                         "finish_reason": None}]
    if prompt_ids is not None:
        chunk["prompt_token_ids"] = prompt_ids
    if forced_tokens is not None:
        chunk[FORCED_TOKENS_FIELD] = forced_tokens
    return chunk


def chat_token_chunk(meta: ResponseMeta, index: int, event: TokenEvent, token_text: TokenText,
                     with_logprobs: bool, with_token_ids: bool, delta: dict[str, Any] | None = None,
                     finish_reason: str | None = None) -> dict[str, Any]:
    """A streamed chat chunk carrying one token of choice `index`; `delta` and `finish_reason` replace the token's
    text and its own finish reason (tool-call parsing)."""
    chunk = meta.envelope("chat.completion.chunk")
    choice: dict[str, Any] = {
        "index": index, "delta": delta if delta is not None else {"content": event.text_delta},
        "logprobs": chat_logprobs([event], token_text) if with_logprobs else None,
        "finish_reason": finish_reason or event.finish_reason, "stop_reason": event.stop_reason}
    if with_token_ids:
        choice["token_ids"] = [event.token_id]
    chunk["choices"] = [choice]
    return chunk


def completion_token_chunk(meta: ResponseMeta, index: int, event: TokenEvent, token_text: TokenText,
                           text_offset: int, with_logprobs: bool,
                           prompt_ids: list[int] | None, with_token_ids: bool) -> dict[str, Any]:
    """A streamed text_completion chunk with one token; `prompt_ids` only on a choice's first chunk."""
    chunk = meta.envelope("text_completion")
    choice: dict[str, Any] = {
        "index": index, "text": event.text_delta,
        "logprobs": completion_logprobs([event], token_text, text_offset) if with_logprobs else None,
        "finish_reason": event.finish_reason, "stop_reason": event.stop_reason}
    if prompt_ids is not None:
        choice["prompt_token_ids"] = prompt_ids
    if with_token_ids:
        choice["token_ids"] = [event.token_id]
    chunk["choices"] = [choice]
    return chunk


def usage_chunk(meta: ResponseMeta, obj: str, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """The final chunk of a stream with include_usage: no choices, usage filled."""
    chunk = meta.envelope(obj)
    chunk["choices"] = []
    chunk["usage"] = usage(prompt_tokens, completion_tokens)
    return chunk
