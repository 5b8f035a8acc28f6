"""How the engine enforces `tool_choice` required or a named function: the call's opening becomes part of the prompt.

A forced answer is a Hermes block, `<tool_call>\\n{"name": "f", "arguments": {"x": ...}}\\n</tool_call>` (the text
the fallback template and Qwen-style templates render for an assistant call, HF's `tojson`, and `tool_parser.py`
reads). Each function the answer may call has an opening (`call_opening`): `<tool_call>\\n{"name": "f", "arguments":`
and, when the first property its parameters declare is required, ` {"x":`, then ` "` when `x` is a string (vLLM's
grammar for a forced call, xgrammar's JSON schema, also writes the properties in their declared order, required ones
present, a string's quote). The engine tokenises the rendered conversation followed by each opening; the longest
token prefix those sequences share is the prompt it generates from: the tokens past the conversation's own are
forced, not sampled, and are reported as part of `prompt_token_ids`, so the response's `token_ids` and logprobs hold
only what the policy sampled. What is left of each sequence is a continuation the choice must begin with
(`prefix_constraint.py`): none when one function is possible (a named function, or `required` with one tool), the
rest of the name and opening otherwise.

The forced tokens are the tokens the next turn's prompt holds at that place: the next call re-renders the assistant
call through the same template, and tokenising that whole text gives the same tokens up to the end of the opening,
because every token before it is the shared tokenisation of the whole text and the opening ends where a GPT-2-style
pre-tokenizer (SmolLM2's, Qwen2's) splits anyway: after `":` (a value follows a space) or after ` "` (a string
value's first letter or digit starts a new pre-token); a key is forced only when it starts with a letter or digit
(` {"_` would be one pre-token). So the trainer's token-prefix merge extends through a forced call
(`tests/engine/test_tool_choice_samples.py`). Where the boundary does move, the merge fails, and the trainer counts it
(`samples/merge_failures_*`) and starts a new sample: no token is mis-trained, the context is repeated. That happens
when a forced string's value starts with punctuation (` "(` is one pre-token, so `(3 + 4)` re-renders as ` "(` +
`3`...), or with a tokenizer whose pre-tokenizer merges across those boundaries.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from engines.serving.prefix_constraint import Continuations
from engines.serving.tool_parser import START_TAG, call_head

Encode = Callable[[str], list[int]]
"""Text to token ids without added special tokens (how chat prompts are tokenised)."""
Decode = Callable[[list[int]], str]
"""Token ids to text, special tokens kept."""


class ForcingError(ValueError):
    """The model's tokenizer cannot carry a forced call (the message says why and what to use instead)."""


@dataclass(frozen=True)
class ForcedCall:
    """The prompt and constraint of a chat completion whose answer must be a call of one of `names`."""

    prompt_ids: tuple[int, ...]
    """What the engine generates from: the conversation and the forced part of the call's opening."""
    forced_tokens: int
    """Tokens at the end of `prompt_ids` that are not the conversation's own tokenisation (the forced opening)."""
    forced_text: str
    """The text those tokens add to the conversation: the answer's text begins with it."""
    names: tuple[str, ...]
    """The functions the answer may call."""
    continuations: Continuations
    """Per function, the tokens its opening continues with past `prompt_ids`; empty when one function is possible
    (nothing left to choose)."""


def first_required_key(parameters: Any) -> str | None:
    """The first property a parameters schema declares, when it is required and starts with a letter or digit."""
    if not isinstance(parameters, dict) or not isinstance(parameters.get("properties"), dict):
        return None
    first = next(iter(parameters["properties"]), None)
    required = parameters.get("required")
    if not isinstance(first, str) or not first[:1].isalnum() or not isinstance(required, list):
        return None
    return first if first in required else None


def arguments_opening(parameters: Any) -> str:
    """What the arguments begin with for this parameters schema: ` {"x":` for a required first property `x`, and
    ` "` after it when `x` is a string; nothing otherwise."""
    key = first_required_key(parameters)
    if key is None:
        return ""
    string = parameters["properties"][key] if isinstance(parameters["properties"][key], dict) else {}
    return " {" + json.dumps(key, ensure_ascii=False) + ":" + (' "' if string.get("type") == "string" else "")


def call_opening(name: str, parameters: Any = None) -> str:
    """The text an answer calling `name` (with this parameters schema) begins with, up to its first value."""
    return START_TAG + "\n" + call_head(name) + arguments_opening(parameters)


def function_openings(tools: list[dict[str, Any]] | None, names: tuple[str, ...]) -> tuple[str, ...]:
    """The opening of each named function, from its first declaration in `tools`."""
    schemas: dict[str, Any] = {}
    for tool in tools or ():
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            schemas.setdefault(function["name"], function.get("parameters"))
    return tuple(call_opening(name, schemas.get(name)) for name in names)


def _common_prefix(sequences: Sequence[Sequence[int]]) -> int:
    shortest = min(len(sequence) for sequence in sequences)
    for position in range(shortest):
        token = sequences[0][position]
        if any(sequence[position] != token for sequence in sequences):
            return position
    return shortest


def plan_forced_call(encode: Encode, decode: Decode, conversation: str, conversation_ids: Sequence[int],
                     names: tuple[str, ...], openings: tuple[str, ...]) -> ForcedCall:
    """The forced prompt for a rendered `conversation` (tokenised as `conversation_ids`) whose answer begins with
    one of `openings` (one per function of `names`); ForcingError when the tokenizer does not decode the shared
    prefix back into its text."""
    if not names or len(names) != len(openings):
        raise ValueError(f"plan_forced_call got {len(names)} names and {len(openings)} openings; pass one opening "
                         "per function, at least one")
    texts = [conversation + opening for opening in openings]
    sequences = [encode(text) for text in texts]
    shared = _common_prefix(sequences)
    while shared and not texts[0].startswith(decode(sequences[0][:shared])):
        shared -= 1  # a prefix ending inside a character (names that differ in a multi-byte one): back off
    covered = decode(sequences[0][:shared])
    if not covered.startswith(conversation):
        raise ForcingError("tool_choice cannot be enforced for this model: its tokenizer does not decode the prompt "
                           "back into the rendered conversation; use tool_choice 'auto'")
    prompt_ids = tuple(sequences[0][:shared])
    kept = _common_prefix([prompt_ids, conversation_ids])
    continuations = tuple(tuple(sequence[shared:]) for sequence in sequences)
    return ForcedCall(prompt_ids, len(prompt_ids) - kept, covered[len(conversation):], names,
                      continuations if any(continuations) else ())
