"""Chunks of a streamed chat completion, one per sampled token, with tool calls parsed as the text arrives.

Every token still gets its chunk (token ids and logprobs are the raw sampled tokens); with tool-call parsing the
chunk's delta carries only the content the parser released (text that may start a `<tool_call>` waits) and each
completed call as a `delta.tool_calls` entry in OpenAI's streaming shape (index, id, type, function name and
arguments, whole). The choice's last chunk has the finish reason `tool_choice` gives (`tool_choice.py`:
`tool_calls` when `auto` made calls) and the count of blocks that could not be parsed. When `tool_choice` forced a
call, each parser is primed with the forced opening (prompt tokens, so they have no chunk of their own): the call
is sent whole once its block ends, the forced part included in its name and arguments, and the last chunk also
carries how many tokens were drawn under the function-name constraint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engines.serving.responses import (
    AUTO,
    CONSTRAINED_TOKENS_FIELD,
    PARSE_FAILURES_FIELD,
    ResponseMeta,
    TokenText,
    chat_token_chunk,
)
from engines.serving.scheduler import TokenEvent
from engines.serving.tool_choice import ToolChoice, answer_finish_reason
from engines.serving.tool_parser import StreamStep, ToolCallStream, new_call_id


def _merged(first: StreamStep, last: StreamStep) -> StreamStep:
    return StreamStep(first.content + last.content, first.tool_calls + last.tool_calls,
                      first.parse_failures + last.parse_failures)


class ChatStreamAssembler:
    """Builds the token chunks of the `n` choices of one streamed chat completion."""

    def __init__(self, meta: ResponseMeta, n: int, token_text: TokenText, with_logprobs: bool,
                 with_token_ids: bool, parse_tool_calls: bool,
                 make_call_id: Callable[[], str] = new_call_id, tool_choice: ToolChoice = AUTO,
                 forced_text: str = "") -> None:
        self._meta = meta
        self._token_text = token_text
        self._with_logprobs = with_logprobs
        self._with_token_ids = with_token_ids
        self._tool_choice = tool_choice
        self._parsers = [self._parser(make_call_id, forced_text) for _ in range(n)] if parse_tool_calls else None
        self._calls_sent = [0] * n
        self._constrained = [0] * n
        self.parse_failures = 0
        """Blocks that could not be parsed, over all choices so far."""

    def _parser(self, make_call_id: Callable[[], str], forced_text: str) -> ToolCallStream:
        forced_names = self._tool_choice.names if self._tool_choice.forces_call else ()
        parser = ToolCallStream(make_call_id, forced_names)
        parser.feed(forced_text)
        return parser

    def token_chunk(self, index: int, event: TokenEvent) -> dict[str, Any]:
        """The chunk of one token event of choice `index`."""
        self._constrained[index] += event.constrained
        if self._parsers is None:
            return chat_token_chunk(self._meta, index, event, self._token_text, self._with_logprobs,
                                    self._with_token_ids)
        parser = self._parsers[index]
        step = parser.feed(event.text_delta)
        if event.finish_reason is not None:
            step = _merged(step, parser.finish())
        self.parse_failures += step.parse_failures
        delta: dict[str, Any] = {"content": step.content}
        if step.tool_calls:
            first = self._calls_sent[index]
            delta["tool_calls"] = [call.stream_delta(first + k) for k, call in enumerate(step.tool_calls)]
            self._calls_sent[index] += len(step.tool_calls)
            if not step.content:
                del delta["content"]
        finish_reason = answer_finish_reason(self._tool_choice, event.finish_reason, bool(self._calls_sent[index]))
        chunk = chat_token_chunk(self._meta, index, event, self._token_text, self._with_logprobs,
                                 self._with_token_ids, delta=delta, finish_reason=finish_reason)
        if event.finish_reason is not None:
            chunk["choices"][0][PARSE_FAILURES_FIELD] = parser.result().parse_failures
            if self._tool_choice.forces_call:
                chunk["choices"][0][CONSTRAINED_TOKENS_FIELD] = self._constrained[index]
        return chunk
