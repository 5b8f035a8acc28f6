"""Which chat template renders a request, and the rendering itself.

The model's own template renders every request it can: one without tools, or any request when the template uses
`tools`. A request with tools or tool messages for a model whose template has no tools (SmolLM2, the `tiny` test
model) is rendered with the fallback `hermes_chatml.jinja`: ChatML turns, the tools as JSON inside `<tools></tools>`
in the system turn, assistant calls as `<tool_call>` blocks, tool results as `<tool_response>` blocks in a user turn
(Qwen2.5's layout, which `tool_parser.py` reads back).

Messages are normalised first, as vLLM does before templating: text parts are joined by newlines, null content
becomes "", and tool-call arguments sent as JSON strings (OpenAI's shape) become objects.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

FALLBACK_TEMPLATE_PATH = Path(__file__).with_name("hermes_chatml.jinja")
"""The fallback template's file (also what `VLLMConfig.chat_template` can point at)."""
TEXT_PART_SEPARATOR = "\n"
"""Joins a message's text parts, as vLLM does for templates that take string content."""
CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")
"""Special tokens the fallback template writes; a tokenizer without them cannot use it."""


class ChatTemplateError(ValueError):
    """Messages the template cannot render; the message names the problem and `param` the request field."""

    def __init__(self, message: str, param: str = "messages") -> None:
        super().__init__(message)
        self.param = param


class ChatTokenizer(Protocol):
    """What rendering needs of a Hugging Face tokenizer."""

    chat_template: Any

    def apply_chat_template(self, conversation: list[dict[str, Any]], **kwargs: Any) -> Any: ...

    def get_vocab(self) -> dict[str, int]: ...


@dataclass(frozen=True)
class RenderedChat:
    """A rendered prompt and the template that produced it."""

    text: str
    """The prompt text (tokenise without adding special tokens)."""
    template: Literal["model", "fallback"]
    """`model`: the tokenizer's own template; `fallback`: hermes_chatml.jinja."""


@functools.cache
def fallback_template() -> str:
    """The fallback template's source."""
    return FALLBACK_TEMPLATE_PATH.read_text()


@functools.lru_cache(maxsize=16)
def template_uses_tools(template: str) -> bool:
    """Whether a Jinja chat template reads the `tools` variable (so it renders tool definitions itself)."""
    import jinja2
    from jinja2 import meta

    try:
        env = jinja2.Environment(extensions=["jinja2.ext.loopcontrols"])
        return "tools" in meta.find_undeclared_variables(env.parse(template))
    except jinja2.TemplateError:  # templates with transformers-only tags: fall back to the word itself
        return re.search(r"\btools\b", template) is not None


def model_template_has_tools(tokenizer: ChatTokenizer) -> bool:
    """Whether the tokenizer's template (its `tool_use` one, when it has several) renders tools."""
    template = tokenizer.chat_template
    if isinstance(template, dict):
        template = template.get("tool_use") or template.get("default")
    return isinstance(template, str) and template_uses_tools(template)


def involves_tools(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> bool:
    """Whether a request defines tools or carries tool calls or tool results."""
    return bool(tools) or any(m.get("role") == "tool" or m.get("tool_calls") for m in messages)


def _text_content(content: Any, index: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ChatTemplateError(f"messages[{index}].content is {type(content).__name__}; send a string, null or a "
                                "list of text parts")
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text":
            raise ChatTemplateError(f"message content part {part!r} is not supported; send text parts only")
        texts.append(part.get("text", ""))
    return TEXT_PART_SEPARATOR.join(texts)


def _template_call(call: Any, index: int) -> Any:
    """A tool call with its arguments as an object where they were sent as a JSON object string."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise ChatTemplateError(f"messages[{index}].tool_calls holds {call!r}; each call needs "
                                "{'type': 'function', 'function': {'name': ..., 'arguments': ...}}")
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            arguments = parsed
    return {**call, "function": {**function, "arguments": arguments if arguments is not None else {}}}


def normalise_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as chat templates expect them: string content, tool-call arguments as objects."""
    normalised = []
    for index, message in enumerate(messages):
        out = {**message, "content": _text_content(message.get("content"), index)}
        if message.get("tool_calls"):
            out["tool_calls"] = [_template_call(call, index) for call in message["tool_calls"]]
        normalised.append(out)
    return normalised


def _check_chatml(tokenizer: ChatTokenizer) -> None:
    vocab = tokenizer.get_vocab()
    missing = [token for token in CHATML_TOKENS if token not in vocab]
    if missing:
        raise ChatTemplateError(f"this request has tools but the model's chat template renders none, and the "
                                f"fallback ChatML template needs tokens {missing} the tokenizer lacks; serve the "
                                "model with a chat template that handles tools")


def render_chat(tokenizer: ChatTokenizer, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                add_generation_prompt: bool = True, continue_final_message: bool = False,
                template_kwargs: dict[str, Any] | None = None) -> RenderedChat:
    """Renders the conversation with the model's template, or the fallback where tools need it."""
    use_fallback = involves_tools(messages, tools) and not model_template_has_tools(tokenizer)
    if use_fallback:
        _check_chatml(tokenizer)
    try:
        text = tokenizer.apply_chat_template(
            normalise_messages(messages), tools=tools or None, tokenize=False,
            chat_template=fallback_template() if use_fallback else None,
            add_generation_prompt=add_generation_prompt and not continue_final_message,
            continue_final_message=continue_final_message, **(template_kwargs or {}))
    except ChatTemplateError:
        raise
    except Exception as exc:  # noqa: BLE001 - template errors are the caller's messages
        raise ChatTemplateError(f"the chat template could not render these messages: {exc}") from exc
    return RenderedChat(text, "fallback" if use_fallback else "model")
