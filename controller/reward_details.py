"""A grade's details made safe to post (pure): whatever a grader put in them (text from the agent's tree included),
the result is JSON the gateway stores losslessly, within a size, so that posting a reward cannot fail on its content.

- text: lone surrogates (a name that was not UTF-8) and NUL bytes replaced; one string at most `max_string_chars`;
- numbers: integers outside the signed 64-bit range and non-finite floats become their text;
- structure: keys become text, tuples and sets lists, other objects their `repr`, nesting past `max_depth` a note;
- size: when the whole still passes `max_bytes`, the longest strings are cut until it fits (each cut says so).
"""

from __future__ import annotations

import json
import math
from typing import Any

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
MAX_DETAILS_BYTES = 4 << 20  # the gateway accepts far more; a reward's details are for humans and MLflow
MAX_STRING_CHARS = 1_000_000  # the longest single string kept (the SWE grader's model_patch cap)
MAX_DEPTH = 16
CUT_NOTE = "…[cut by the controller: {dropped} characters]"


def safe_text(text: str, max_chars: int = MAX_STRING_CHARS) -> str:
    """`text` as valid UTF-8 without NUL, at most `max_chars` characters (plus the note of what was cut)."""
    clean = text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")
    if len(clean) <= max_chars:
        return clean
    return clean[:max_chars] + CUT_NOTE.format(dropped=len(clean) - max_chars)


def _safe(value: Any, depth: int, max_chars: int) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if INT64_MIN <= value <= INT64_MAX else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return safe_text(value, max_chars)
    if depth >= MAX_DEPTH:
        return f"[nested deeper than {MAX_DEPTH} levels: left out]"
    if isinstance(value, dict):
        return {safe_text(str(key), 200): _safe(item, depth + 1, max_chars) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_safe(item, depth + 1, max_chars) for item in value]
    return safe_text(repr(value), 2_000)


def _size(details: dict[str, Any]) -> int:
    return len(json.dumps(details, ensure_ascii=False).encode("utf-8"))


def safe_details(details: dict[str, Any], max_bytes: int = MAX_DETAILS_BYTES) -> dict[str, Any]:
    """`details` as JSON-safe data of at most about `max_bytes` (see the module's rules)."""
    result = _safe(details if isinstance(details, dict) else {"details": details}, 0, MAX_STRING_CHARS)
    max_chars = MAX_STRING_CHARS
    while _size(result) > max_bytes and max_chars > 64:
        max_chars //= 4
        result = _safe(result, 0, max_chars)
    if _size(result) > max_bytes:  # many small strings: keep the flags a trainer reads, say what was left out
        kept = {key: result[key] for key in ("resolved", "tamper", "error") if key in result}
        result = {**kept, "details_left_out": f"the grade's details were over {max_bytes} bytes"}
    return result
