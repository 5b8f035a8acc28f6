"""`tool_choice` of a chat completion: what it asks of the answer, checked against the request's `tools` (pure).

- `auto` (the default with tools): the model decides; `<tool_call>` blocks it writes are parsed into `tool_calls`.
- `none`: nothing is parsed, a `<tool_call>` the model writes stays in the content as text; the tools are still
  rendered in the prompt. vLLM does the same (its `--exclude-tools-when-tool-choice-none` is off by default).
- `required`: the answer is a call of one of the declared functions.
- a named function (`{"type": "function", "function": {"name": ...}}`): the answer is a call of that function.

The last two are enforced by forcing the call's opening into the prompt (`forced_call.py`). Invalid values are refused
as vLLM refuses them (a named function not among the tools, a malformed object, an unknown string), and so is a
forcing choice without a function to call (vLLM: "When using `tool_choice`, `tools` must be set."). Unlike vLLM,
`auto` and `none` are accepted without tools (no-ops), so harnesses that always send one keep working.

Finish reasons, as OpenAI and vLLM answer: `tool_calls` when `auto` made calls, or when `required` made calls and the
model stopped on its own; the model's own reason (`stop`, `length`) for a named function and for answers without calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

ToolChoiceMode = Literal["auto", "none", "required", "function"]
CORRECT_NAMED_USAGE = '{"type": "function", "function": {"name": "my_function"}}'
TOOL_CALLS_FINISH = "tool_calls"


class ToolChoiceError(ValueError):
    """A `tool_choice` the request cannot have; the message names the value and the fix, `param` the field."""

    def __init__(self, message: str, param: str = "tool_choice") -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class ToolChoice:
    """What the request's `tool_choice` asks of every choice of the answer."""

    mode: ToolChoiceMode
    """`auto`, `none`, `required`, or `function` (one named function)."""
    names: tuple[str, ...] = ()
    """The functions a forced answer may call (`required`: every declared one; `function`: the named one); empty
    when nothing is forced."""
    has_tools: bool = False
    """Whether the request declares tools (without them nothing is parsed)."""

    @property
    def forces_call(self) -> bool:
        """Whether the engine forces a tool call (`required` or a named function)."""
        return self.mode in ("required", "function")

    @property
    def parses_calls(self) -> bool:
        """Whether `<tool_call>` blocks become `tool_calls` (tools given, tool_choice not `none`)."""
        return self.has_tools and self.mode != "none"


def function_names(tools: list[dict[str, Any]] | None) -> tuple[str, ...]:
    """The declared function names, in order, each once (tools of other types are skipped)."""
    names: list[str] = []
    for tool in tools or ():
        function = tool.get("function") if isinstance(tool, dict) and tool.get("type", "function") == "function" \
            else None
        name = function.get("name") if isinstance(function, dict) else None
        if isinstance(name, str) and name and name not in names:
            names.append(name)
    return tuple(names)


def _named_function(choice: dict[str, Any]) -> str:
    function = choice.get("function")
    if choice.get("type", "function") != "function" or not isinstance(function, dict):
        raise ToolChoiceError(f"tool_choice={choice!r} is not a named function; send {CORRECT_NAMED_USAGE}",
                              param="tool_choice.function")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ToolChoiceError(f"tool_choice.function.name={name!r} must be a non-empty string; send "
                              f"{CORRECT_NAMED_USAGE}", param="tool_choice.function.name")
    return name


def read_tool_choice(tool_choice: Any, tools: list[dict[str, Any]] | None) -> ToolChoice:
    """The request's `tool_choice` (None: `auto`) checked against its `tools`; ToolChoiceError when invalid."""
    declared = function_names(tools)
    has_tools = bool(tools)
    if tool_choice is None or tool_choice in ("auto", "none"):
        return ToolChoice(tool_choice or "auto", (), has_tools)
    if tool_choice == "required":
        if not declared:
            raise ToolChoiceError("tool_choice='required' needs at least one function in `tools`, and the request "
                                  "declares none; send the functions the model may call, or use tool_choice 'auto'")
        return ToolChoice("required", declared, has_tools)
    if isinstance(tool_choice, dict):
        name = _named_function(tool_choice)
        if name not in declared:
            raise ToolChoiceError(f"tool_choice names the function {name!r}, which is not among the request's tools "
                                  f"{list(declared)}; name one of them, or add it to `tools`")
        return ToolChoice("function", (name,), has_tools)
    raise ToolChoiceError(f"tool_choice={tool_choice!r} is not supported; use 'none', 'auto', 'required' or "
                          f"{CORRECT_NAMED_USAGE}")


def answer_finish_reason(choice: ToolChoice, model_finish: str | None, made_calls: bool) -> str | None:
    """A choice's finish reason from the model's own (`stop`, `length`; None while it generates)."""
    if model_finish is None or not made_calls or choice.mode == "function":
        return model_finish
    if choice.mode == "required":
        return TOOL_CALLS_FINISH if model_finish == "stop" else model_finish
    return TOOL_CALLS_FINISH
