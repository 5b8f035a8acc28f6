"""The tool-call parser table shared by both engines: generated text -> content, calls and failures.

`tests/engine/test_tool_parser.py` runs it against the embedded engine's parser (`engines.serving.tool_parser`) and,
in `.venv-vllm`, against vLLM's own `hermes` parser. Where vLLM answers differently on purpose, the case carries
vLLM's answer and the reason (`vllm`, `why`). Our deliberate differences:

- whitespace next to a parsed block is trimmed from the content (vLLM keeps the text before the first block as is);
- text after or between blocks is content (vLLM keeps only the text before the first block);
- a block that cannot be parsed stays as text on its own and is counted; the others are still calls (vLLM turns the
  whole answer into content when any block fails);
- a call without `arguments` has `{}` (vLLM fails on it and answers the whole text as content).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VllmAnswer:
    """What vLLM's hermes parser answers where it differs from ours."""

    content: str | None
    """Its content."""
    calls: tuple[tuple[str, str], ...]
    """Its (name, arguments JSON) calls."""


@dataclass(frozen=True)
class ToolCallCase:
    """One generated text and how it parses."""

    name: str
    """Case id."""
    text: str
    """The generated text."""
    content: str | None
    """Expected content."""
    calls: tuple[tuple[str, str], ...] = ()
    """Expected (name, arguments JSON) calls, in order."""
    failures: int = 0
    """Expected unparseable blocks (ours only: vLLM counts none)."""
    vllm: VllmAnswer | None = None
    """vLLM's answer where it differs on purpose."""
    why: str = ""
    """Why it differs."""


ADD = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
ADD_CALL = ("add", '{"a": 1, "b": 2}')
READ = '<tool_call>\n{"name": "read_file", "arguments": {"path": "src/é.py"}}\n</tool_call>'
READ_CALL = ("read_file", '{"path": "src/é.py"}')
BAD_JSON = '<tool_call>\n{"name": "add", "arguments": {"a": }\n</tool_call>'
UNKNOWN_SHAPE = '<tool_call>\n{"function": "add", "args": {"a": 1}}\n</tool_call>'

CASES: tuple[ToolCallCase, ...] = (
    ToolCallCase("one_call", ADD, None, (ADD_CALL,)),
    ToolCallCase("two_parallel_calls", f"{ADD}\n{READ}", None, (ADD_CALL, READ_CALL)),
    ToolCallCase("text_before_call", f"I will add them.{ADD}", "I will add them.", (ADD_CALL,)),
    ToolCallCase("text_and_newline_before_call", f"I will add them.\n{ADD}", "I will add them.", (ADD_CALL,),
                 vllm=VllmAnswer("I will add them.\n", (ADD_CALL,)),
                 why="we trim whitespace next to a parsed block"),
    ToolCallCase("bad_json", f"Hi {BAD_JSON}", f"Hi {BAD_JSON}", failures=1),
    ToolCallCase("unknown_shape", UNKNOWN_SHAPE, UNKNOWN_SHAPE, failures=1),
    ToolCallCase("no_call", "Just an answer, no tools.\n", "Just an answer, no tools.\n"),
    ToolCallCase("almost_a_tag", "a <tool_c and <b>", "a <tool_c and <b>"),
    ToolCallCase("open_last_block", '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}', None,
                 (ADD_CALL,)),
    ToolCallCase("text_after_call", f"{ADD}\nDone.", "Done.", (ADD_CALL,),
                 vllm=VllmAnswer(None, (ADD_CALL,)), why="vLLM drops the text after the first block"),
    ToolCallCase("good_and_bad_calls", f"{ADD}\n{BAD_JSON}", BAD_JSON, (ADD_CALL,), failures=1,
                 vllm=VllmAnswer(f"{ADD}\n{BAD_JSON}", ()),
                 why="vLLM answers the whole text as content when any block fails; we keep the good calls"),
    ToolCallCase("call_without_arguments", '<tool_call>\n{"name": "now"}\n</tool_call>', None, (("now", "{}"),),
                 vllm=VllmAnswer('<tool_call>\n{"name": "now"}\n</tool_call>', ()),
                 why="vLLM requires `arguments`; a function without parameters may omit them"),
)
