"""Hermes-style tool calls read from generated text (pure): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.

One incremental parser serves both answers: `ToolCallStream` takes text as it is generated and releases content
that cannot be part of a call (text that may still become `<tool_call>` is held back) and each call once its block
is complete; `parse_tool_calls` feeds it a whole text at once, so streamed and whole answers agree.

Rules (the deliberate differences from vLLM's `hermes` parser are listed in tests/engine/tool_call_cases.py):
- several blocks are parallel calls, in order; a last block left open at the end is parsed too (as vLLM does);
- a block whose body is not a JSON object with a non-empty string `name` and object `arguments` (absent: `{}`; a
  string holding a JSON object is accepted) stays in the content as text, tags included, and counts as a failure;
- content is the text outside the parsed blocks, whitespace next to a parsed block trimmed; it is None when it is
  empty and calls were made;
- an engine-forced call (`tool_choice` required or a named function: the parser is primed with the forced opening,
  `forced_names` given) is a call even when the model did not complete its JSON: the first block that starts with
  the opening `call_head(name)` of a forced function becomes a call of that function whose arguments are the JSON
  object at the start of what the model wrote after `"arguments":`, or, when none parses there, that text as it is
  (OpenAI's arguments "may not be valid JSON"; vLLM answers a named call the same way); the latter counts as a
  failure.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

START_TAG = "<tool_call>"
END_TAG = "</tool_call>"


def new_call_id() -> str:
    """A fresh OpenAI-style tool call id such as call_3f2a..."""
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass(frozen=True)
class ToolCall:
    """One parsed function call."""

    id: str
    """`call_...`."""
    name: str
    """Function name."""
    arguments: str
    """Arguments as a JSON object string."""

    def openai(self) -> dict[str, Any]:
        """The call in a chat completion message's `tool_calls`."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    def stream_delta(self, index: int) -> dict[str, Any]:
        """The call as one `delta.tool_calls` entry of a streamed chunk; `index` counts the choice's calls."""
        return {"index": index, **self.openai()}


@dataclass(frozen=True)
class StreamStep:
    """What one `feed` or `finish` released."""

    content: str = ""
    """Content text now settled."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Calls completed."""
    parse_failures: int = 0
    """Blocks that could not be parsed (their text is in `content`)."""


@dataclass(frozen=True)
class ParsedOutput:
    """A whole answer split into content and tool calls."""

    content: str | None
    """Text outside the parsed blocks; None when empty and calls were made."""
    tool_calls: tuple[ToolCall, ...]
    """Calls, in order."""
    parse_failures: int
    """Blocks left as text because they could not be parsed."""


def parse_call_body(body: str) -> tuple[str, str] | None:
    """(name, arguments JSON) of one block's body, or None when it is not a call."""
    try:
        call = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
        return None
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return call["name"], json.dumps(arguments, ensure_ascii=False)


def call_head(name: str) -> str:
    """The beginning of a call block's body up to its arguments, as chat templates render a call (HF's `tojson`:
    `{"name": "f", "arguments": {...}}`), without the space before the arguments."""
    return '{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments":'


def forced_call_body(body: str, names: tuple[str, ...]) -> tuple[str, str, bool] | None:
    """(name, arguments, arguments are a JSON object) of a forced block whose body does not parse as a whole, or None
    when it does not start with a forced function's `call_head`."""
    for name in names:
        head = call_head(name)
        if body.startswith(head):
            written = body[len(head):].strip()
            try:
                arguments, _ = json.JSONDecoder().raw_decode(written)
            except json.JSONDecodeError:
                return name, written, False
            if isinstance(arguments, dict):
                return name, json.dumps(arguments, ensure_ascii=False), True
            return name, written, False
    return None


def partial_prefix_length(text: str, tag: str) -> int:
    """Length of the longest end of `text` that is a proper beginning of `tag` (what may still become the tag)."""
    for length in range(min(len(text), len(tag) - 1), 0, -1):
        if text.endswith(tag[:length]):
            return length
    return 0


class ToolCallStream:
    """Incremental Hermes parser of one choice."""

    def __init__(self, make_call_id: Callable[[], str] = new_call_id, forced_names: tuple[str, ...] = ()) -> None:
        self._make_call_id = make_call_id
        self._forced_names = forced_names
        """Functions the first block is a forced call of (the engine wrote its opening); empty: none forced."""
        self._buffer = ""
        self._in_block = False
        self._held_space = ""
        self._after_call = False
        self._content: list[str] = []
        self._calls: list[ToolCall] = []
        self._failures = 0

    def feed(self, text: str) -> StreamStep:
        """Adds generated text; returns what became settled."""
        self._buffer += text
        return self._step(self._drain)

    def finish(self) -> StreamStep:
        """Ends the text: an open block is parsed, held-back text released."""
        def drain_all() -> None:
            self._drain()
            if self._in_block:
                self._in_block = False
                self._block(self._buffer, closed=False)
            else:
                self._text(self._buffer)
            self._buffer = ""
            self._emit(self._held_space)
            self._held_space = ""
        return self._step(drain_all)

    def result(self) -> ParsedOutput:
        """Everything released so far, as a whole answer."""
        content = "".join(self._content)
        return ParsedOutput(None if not content and self._calls else content, tuple(self._calls), self._failures)

    def _step(self, work: Callable[[], None]) -> StreamStep:
        content_before, calls_before, failures_before = len(self._content), len(self._calls), self._failures
        work()
        return StreamStep("".join(self._content[content_before:]), tuple(self._calls[calls_before:]),
                          self._failures - failures_before)

    def _drain(self) -> None:
        while True:
            if self._in_block:
                end = self._buffer.find(END_TAG)
                if end == -1:
                    return
                body, self._buffer = self._buffer[:end], self._buffer[end + len(END_TAG):]
                self._in_block = False
                self._block(body, closed=True)
                continue
            start = self._buffer.find(START_TAG)
            if start == -1:
                keep = partial_prefix_length(self._buffer, START_TAG)
                self._text(self._buffer[: len(self._buffer) - keep])
                self._buffer = self._buffer[len(self._buffer) - keep:]
                return
            self._text(self._buffer[:start])
            self._buffer = self._buffer[start + len(START_TAG):]
            self._in_block = True

    def _text(self, text: str) -> None:
        """Content outside blocks: whitespace after a call dropped, trailing whitespace held until settled."""
        if self._after_call:
            text = text.lstrip()
            if not text:
                return
            self._after_call = False
        combined = self._held_space + text
        settled = combined.rstrip()
        self._held_space = combined[len(settled):]
        self._emit(settled)

    def _block(self, body: str, closed: bool) -> None:
        parsed = parse_call_body(body.strip())
        forced_names, self._forced_names = self._forced_names, ()
        if parsed is None and forced_names:
            forced = forced_call_body(body.strip(), forced_names)
            if forced is not None:
                self._failures += 0 if forced[2] else 1
                parsed = forced[:2]
        if parsed is None:
            self._failures += 1
            self._text(START_TAG + body + (END_TAG if closed else ""))
            return
        self._held_space = ""
        self._after_call = True
        self._calls.append(ToolCall(self._make_call_id(), *parsed))

    def _emit(self, text: str) -> None:
        if text:
            self._content.append(text)


def parse_tool_calls(text: str, make_call_id: Callable[[], str] = new_call_id,
                     forced_names: tuple[str, ...] = ()) -> ParsedOutput:
    """Splits a whole generated text into content and tool calls (`forced_names`: the text starts with an
    engine-forced call of one of them)."""
    stream = ToolCallStream(make_call_id, forced_names)
    stream.feed(text)
    stream.finish()
    return stream.result()
