"""Pure extraction of what the trainer needs from an engine's answer, in vLLM's shapes (the embedded engine's too).

Chat: top-level `prompt_token_ids`, `choices[i].token_ids`, `choices[i].logprobs.content[*].logprob`.
Completions: `choices[i].prompt_token_ids` (or top-level), `choices[i].token_ids`, `choices[i].logprobs.token_logprobs`.
Streams: the same fields spread over SSE chunks (prompt IDs once, each chunk's new IDs); chunks of several choices
interleave and are told apart by `index`.
Every choice is captured: the first (index 0) in `Captured`'s own fields, the others in `Captured.extra_choices`.
An answer that breaks these shapes (a JSON list, `choices: [1]`, `policy_version: "abc"`, a token ID outside
[0, 2^31), an undecodable chunk) is not guessed at: `Captured.broken` is set and `error` says what broke.
Token IDs and logprobs are checked in bulk (C loops over the list: `token_ids_packed`, `logprob_values`), never by
Python code per element: a call's ~600 token IDs cost a few microseconds, and the prompt's IDs are packed for the
store once, as they are checked.
"""

from __future__ import annotations

import math
import struct
import sys
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import orjson

from gateway.records import MAX_VERSION

MAX_TOKEN_ID = 2**31 - 1  # token IDs are stored as int32
SIGN_BYTE = 3 if sys.byteorder == "little" else 0
"""The byte of a packed int32 that holds its sign bit, in this machine's byte order."""
INT, FLOAT, NONE = int, float, type(None)
MAX_CHOICES = 1024  # the largest `index` of a choice taken as valid


class ProtocolError(ValueError):
    """The upstream's answer breaks the OpenAI/vLLM shapes the gateway records."""


@dataclass
class ChoiceCapture:
    """Token-level facts of one choice with index >= 1 (the first choice's are `Captured`'s own fields)."""

    index: int
    prompt_token_ids: list[int] = field(default_factory=list)  # empty: the call's prompt (chat; one prompt)
    response_token_ids: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    text_parts: list[str] = field(default_factory=list)
    finish_reason: str | None = None

    @property
    def response_text(self) -> str:
        """The choice's text."""
        return "".join(self.text_parts)


@dataclass
class Captured:
    """Token-level facts of one response: the first choice in its own fields, the others in `extra_choices`."""

    prompt_token_ids: list[int] = field(default_factory=list)
    response_token_ids: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    text_parts: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    n_choices: int = 0
    prompt_ids_packed: bytes | None = field(default=None, repr=False, compare=False)
    """`prompt_token_ids` as the store packs them (int32), set with them by capture; None: pack them when stored."""
    extra_choices: dict[int, ChoiceCapture] = field(default_factory=dict)  # by index (>= 1), in arrival order
    response_id: str | None = None
    policy_version: int | None = None
    error: str | None = None
    broken: bool = False  # the answer breaks the protocol (error says how): an upstream error, answered 502
    forced_prompt_tokens: int | None = None
    """The engine's `tool_choice_forced_tokens`: a forced call's opening it put at the end of the prompt (the embedded
    engine); None when it said nothing (vLLM, whose grammar constrains the response's own tokens)."""

    @property
    def response_text(self) -> str:
        """The first choice's text."""
        return "".join(self.text_parts)

    def other_choices(self) -> list[ChoiceCapture]:
        """The choices with index >= 1, by index."""
        return [self.extra_choices[index] for index in sorted(self.extra_choices)]


def _short(value: Any) -> str:
    return repr(value)[:80]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def token_ids_packed(value: Any) -> bytes | None:
    """`value` packed as int32 (`gateway.tokens.pack_ids`) when it is a list of token IDs in [0, 2^31), else None.
    Checked in bulk: the packing refuses anything but integers of int32's range (and booleans, which it takes for
    0 and 1), the packed sign bits the negative ones, and the items as orjson writes them the booleans (JSON's `true`
    and `false`: an `e` that no integer's digits hold; twice as fast as the set of their types)."""
    if type(value) is not list:
        return None
    if not value:
        return b""
    try:
        packed = struct.pack(f"{len(value)}i", *value)  # twice as fast as array("i", value) on a list
    except (struct.error, TypeError, OverflowError):
        return None
    if not packed[SIGN_BYTE::4].isascii() or b"e" in orjson.dumps(value):
        return None
    return packed


def _ids(value: Any, where: str) -> list[int]:
    if token_ids_packed(value) is None:
        raise ProtocolError(f"{where} must be a list of token IDs in [0, 2^31), got {_short(value)}")
    return value


def _packed_ids(value: Any, where: str) -> tuple[list[int], bytes]:
    """(a copy of the token IDs `value`, packed), or ProtocolError naming `where`."""
    packed = token_ids_packed(value)
    if packed is None:
        raise ProtocolError(f"{where} must be a list of token IDs in [0, 2^31), got {_short(value)}")
    return list(value), packed


def logprob_values(values: list[Any]) -> list[float]:
    """`values` as logprobs (a null one as NaN), checked in bulk by the set of their types; ProtocolError naming
    the first that is not a number or null."""
    kinds = set(map(type, values))
    if kinds <= {FLOAT}:
        return values
    if kinds <= {FLOAT, INT, NONE}:
        return [math.nan if v is None else float(v) for v in values]
    wrong = next(v for v in values if type(v) not in (FLOAT, INT, NONE))
    raise ProtocolError(f"a logprob must be a number or null, got {_short(wrong)}")


def _typed(container: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    """`container[key]` when it is absent/null or of `kind`; ProtocolError otherwise."""
    value = container.get(key)
    if value is not None and not isinstance(value, kind):
        raise ProtocolError(f"{where}.{key} must be {getattr(kind, '__name__', kind)}, got {_short(value)}")
    return value


def _add_logprobs(target: Captured | ChoiceCapture, logprobs: dict[str, Any]) -> None:
    content = _typed(logprobs, "content", list, "logprobs")
    if content is not None:
        try:
            values = list(map(dict.get, content, repeat("logprob")))  # a TypeError on an item that is not an object
        except TypeError:
            raise ProtocolError(f"logprobs.content must be a list of objects, got {_short(content)}") from None
        target.response_logprobs.extend(logprob_values(values))
        return
    token_logprobs = _typed(logprobs, "token_logprobs", list, "logprobs")
    if token_logprobs is not None:
        target.response_logprobs.extend(logprob_values(token_logprobs))


def _add_choice(cap: Captured, choice: Any) -> None:
    """Fold one choice (or one streamed choice delta) into `cap`: index 0 into its own fields, others into
    `cap.extra_choices[index]`."""
    if not isinstance(choice, dict):
        raise ProtocolError(f"a choice must be an object, got {_short(choice)}")
    index = choice.get("index", 0)
    if not _is_int(index) or not 0 <= index < MAX_CHOICES:
        raise ProtocolError(f"choice index must be an integer in [0, {MAX_CHOICES}), got {_short(index)}")
    cap.n_choices = max(cap.n_choices, index + 1)
    target = cap if index == 0 else cap.extra_choices.setdefault(index, ChoiceCapture(index))
    where = f"choices[{index}]"
    if choice.get("prompt_token_ids"):
        ids, packed = _packed_ids(choice["prompt_token_ids"], f"{where}.prompt_token_ids")
        target.prompt_token_ids = ids
        if index == 0:
            cap.prompt_ids_packed = packed
    if choice.get("token_ids"):
        target.response_token_ids.extend(_ids(choice["token_ids"], f"{where}.token_ids"))
    logprobs = _typed(choice, "logprobs", dict, where)
    if logprobs is not None:
        _add_logprobs(target, logprobs)
    message = _typed(choice, "message", dict, where) or _typed(choice, "delta", dict, where)
    text = _typed(message, "content", str, "message") if message else _typed(choice, "text", str, where)
    if text:
        target.text_parts.append(text)
    finish_reason = _typed(choice, "finish_reason", str, where)
    if finish_reason is not None:
        target.finish_reason = finish_reason


def _version(value: Any) -> int:
    """A policy version from an answer's body or header: an integer in [0, MAX_VERSION] (the store's column; a
    larger one was a 500 on SQLite and an unrecorded call), else ProtocolError."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 10:
        value = int(value)
    if _is_int(value) and 0 <= value <= MAX_VERSION:
        return value
    raise ProtocolError(f"policy_version must be an integer from 0 to {MAX_VERSION}, got {_short(value)}")


def _forced_tokens(value: Any) -> int:
    """An answer's `tool_choice_forced_tokens`: a count of prompt tokens, else ProtocolError."""
    if _is_int(value) and 0 <= value <= 1 << 20:
        return value
    raise ProtocolError(f"tool_choice_forced_tokens must be a token count, got {_short(value)}")


def _add_body(cap: Captured, body: Any) -> None:
    """Fold one response body or one stream chunk into `cap`."""
    if not isinstance(body, dict):
        raise ProtocolError(f"an answer must be a JSON object, got {type(body).__name__}")
    if body.get("error") is not None:
        error = body["error"]
        cap.error = error.get("message", str(error)) if isinstance(error, dict) else str(error)
        return
    cap.response_id = cap.response_id or _typed(body, "id", str, "answer")
    if body.get("prompt_token_ids"):
        cap.prompt_token_ids, cap.prompt_ids_packed = _packed_ids(body["prompt_token_ids"], "prompt_token_ids")
    if body.get("policy_version") is not None:
        cap.policy_version = _version(body["policy_version"])
    if body.get("tool_choice_forced_tokens") is not None:
        cap.forced_prompt_tokens = _forced_tokens(body["tool_choice_forced_tokens"])
    for choice in _typed(body, "choices", list, "answer") or ():
        _add_choice(cap, choice)


def _broken(cap: Captured, problem: str) -> Captured:
    cap.error, cap.broken = f"the upstream's answer breaks the protocol: {problem}", True
    return cap


def capture_bytes(payload: bytes) -> Captured:
    """Capture a non-streamed 200 answer from its bytes: not JSON, or JSON off the protocol's shapes, is broken."""
    try:
        decoded = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return _broken(Captured(), "a 200 body that is not JSON")
    return capture_json(decoded)


def capture_json(body: Any) -> Captured:
    """Capture a non-streamed response body (any decoded JSON value; anything but the protocol's shapes is broken)."""
    cap = Captured()
    try:
        _add_body(cap, body)
    except ProtocolError as exc:
        return _broken(Captured(), str(exc))
    return cap


def parse_version_header(value: str | None) -> int | None:
    """The `x-policy-version` header as an integer (None when absent); ProtocolError when it is not one."""
    return None if value is None else _version(value.strip())


def capture_chunk(cap: Captured, chunk: Any) -> None:
    """Fold one decoded stream chunk into `cap`, as `capture_sse` folds each line (for a caller that decodes the
    chunks itself); a chunk off the protocol's shapes marks `cap` broken."""
    try:
        _add_body(cap, chunk)
    except ProtocolError as exc:
        _broken(cap, str(exc))


def capture_sse(stream: bytes) -> Captured:
    """Capture a whole SSE stream (`data: {...}` events, `data: [DONE]` ignored)."""
    cap = Captured()
    for line in stream.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if not payload or payload == b"[DONE]":
            continue
        try:
            _add_body(cap, orjson.loads(payload))
        except orjson.JSONDecodeError:
            return _broken(cap, f"undecodable stream chunk: {payload[:200]!r}")
        except ProtocolError as exc:
            return _broken(cap, str(exc))
    return cap
