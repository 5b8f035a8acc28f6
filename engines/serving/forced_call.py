"""How the engine enforces `tool_choice` required or a named function: the call's opening becomes part of the prompt.

A forced answer is a Hermes block, `<tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>` (the text the
fallback template and Qwen-style templates render for an assistant call, and `tool_parser.py` reads). For each
function the answer may call, the engine tokenises the rendered conversation followed by that function's opening,
`<tool_call>\\n` + `tool_parser.call_head(f)` (up to `"arguments":`, without the space that begins the arguments).
The longest token prefix shared by those sequences is the prompt the engine generates from: the tokens past the
conversation's own are forced, not sampled, and are reported as part of `prompt_token_ids`, so the response's
`token_ids` and logprobs hold only what the policy sampled. What is left of each function's sequence is a
continuation the choice must begin with (`prefix_constraint.py`): none when one function is possible (a named function,
or `required` with one tool), the rest of the name up to `"arguments":` otherwise.

The forced tokens are the tokens the next turn's prompt holds at that place: the next call re-renders the assistant
call through the same template, and tokenising that whole text gives the same tokens up to the arguments, because a
GPT-2-style pre-tokenizer (SmolLM2's, Qwen2's) splits `"arguments":` from the ` {` that follows it, and every token
before is the shared tokenisation of the whole text. So the trainer's token-prefix merge extends through a forced
call (`tests/engine/test_tool_choice_samples.py`); a tokenizer that merged across that boundary would cost a merge
failure (counted by the trainer), not a wrong sample.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

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
    """Per function, the tokens its call continues with up to `"arguments":`; empty when one function is possible
    (nothing left to choose)."""


def call_opening(name: str) -> str:
    """The text an answer calling `name` begins with, up to its arguments."""
    return START_TAG + "\n" + call_head(name)


def _common_prefix(sequences: Sequence[Sequence[int]]) -> int:
    shortest = min(len(sequence) for sequence in sequences)
    for position in range(shortest):
        token = sequences[0][position]
        if any(sequence[position] != token for sequence in sequences):
            return position
    return shortest


def plan_forced_call(encode: Encode, decode: Decode, conversation: str, conversation_ids: Sequence[int],
                     names: tuple[str, ...]) -> ForcedCall:
    """The forced prompt for a rendered `conversation` (tokenised as `conversation_ids`) whose answer calls one of
    `names`; ForcingError when the tokenizer does not decode the shared prefix back into its text."""
    if not names:
        raise ValueError("plan_forced_call needs at least one function name; a forced call must call something")
    texts = [conversation + call_opening(name) for name in names]
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
