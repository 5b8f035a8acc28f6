"""JSON request bodies under one rule: every value in them is one the store keeps exactly, or the body is refused.

Stored bodies (a rollout's `input`, event payloads, a reward's `details`, the harness's calls) are written and read
with orjson, which keeps integers from -2**63 to 2**64-1 and finite 64-bit floats. Anything else a JSON parser may
take would be changed or refused on the way into the store: a wider integer (orjson reads it as a float, losing
digits, and refuses to write it), `NaN` / `Infinity` (not JSON: Python's parser takes them, orjson writes them as
null), a literal past a double's range (`1e400`, read as Infinity), and a lone UTF-16 surrogate escape (`"\\ud800"`,
not text: orjson refuses to write it), and arrays and objects nested deeper than orjson writes (254 levels). Such a
body is refused with a 400 naming the field and the fix.

`loads` is the parser of every harness body (`asgi.json_object`); `check` is applied by the admin app's front to
every JSON body before FastAPI reads it. One place each, so no route can forget the rule.

Cost: orjson parses as before; the body's bytes are scanned for a run of 19 digits (an integer out of range has at
least 19) and the parsed value written once by orjson (which fails only past its depth): 0.5-0.8 us per KB of body
(measured on chat requests of 0.6 to 104 KB; orjson's parse is 0.5-0.8 us per KB). Where the scan finds such a run,
the parsed value is walked for a float of 2**63 or more (what orjson makes of a wider integer); only where there is
one, or where orjson refused the body, and only up to `NAMING_BYTES`, does Python's parser read the body again to
name the field (an attack review's 2.6 MB body with a 19-digit run in a string was parsed twice, 1.7 times its
charge, and held the event loop 3 s for four rollouts).

What a parse costs is not what a body weighs: 32 MiB of `{},` builds about 1 GB of dicts. `parse_bytes` bounds it
from the body's bytes before anything is parsed (measured with orjson 3.13 on CPython 3.11, peak RSS over the body:
an ASCII text 2.0x its size, one astral character in it 5.0x, a list of empty objects 30x, of two-letter strings 19x,
of one-key objects 32x), so that the request's charge (`request_bytes.Held.reserve`) covers the parse before it runs.
"""

from __future__ import annotations

import contextlib
import gc
import json
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.errors import BadRequest

INT_MIN, INT_MAX = -(2**63), 2**64 - 1
"""The integers the store keeps exactly (orjson's range)."""
MAX_DEPTH = 254
"""The deepest nesting of arrays and objects orjson writes."""
_DIGITS = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))  # digits -> '0', the rest -> ' '
_LONG_RUN = b"0" * 19  # every integer out of range has at least 19 digits
_MAX_INT_DIGITS = 20  # digits of INT_MAX; longer literals are refused without converting them
WIDE = float(2**63)  # what orjson reads an integer literal past its range as: a float at least this large
NAMING_BYTES = 256 * 1024
"""Up to this size a body that may hold a value the store cannot keep is read again by Python's parser, to name the
field exactly (about 10 times slower than orjson, and not charged: at most a few MB, one body at a time on the event
loop); a larger one is refused from orjson's message or the walk of its value."""
VALUE_BYTES = 128
"""The most one parsed JSON value costs (its object, its slot in a list or dict, orjson's working copy): measured up
to 93 bytes for two-letter strings and 86 for one-key objects, per value counted as `parse_bytes` counts them."""
_NOT_COUNTED = bytes(byte for byte in range(256) if byte not in b",:{[")  # a value follows each of them


def is_integer(value: Any) -> bool:
    """Whether `value` is a JSON integer the store keeps: an int, or a whole float (`2.0` is the integer 2 in JSON and
    in its schemas; JavaScript writes no difference), within [INT_MIN, INT_MAX]; never a bool."""
    if isinstance(value, float):
        return value.is_integer() and INT_MIN <= value <= INT_MAX
    return isinstance(value, int) and not isinstance(value, bool)


class NotJson(BadRequest):
    """The body is not JSON at all."""


@dataclass(frozen=True)
class _Unkept:
    """A value the store cannot keep exactly, in place of the value, while the body is searched for it."""

    problem: str


def loads(raw: bytes) -> Any:
    """The JSON value of `raw`; BadRequest naming the field of the first value the store cannot keep exactly (see
    the module), NotJson when `raw` is not JSON."""
    try:
        value = _parsed(raw)
    except orjson.JSONDecodeError as exc:
        if len(raw) <= NAMING_BYTES:
            _refuse_unkept(raw)  # NaN, Infinity, 1e400 and lone surrogates are JSONDecodeErrors to orjson: name them
        raise NotJson(f"request body is not valid JSON: {exc}") from None
    if _LONG_RUN in raw.translate(_DIGITS) and (wide := _first_wide_float(value)) is not None:
        if len(raw) <= NAMING_BYTES:
            _refuse_unkept(raw)  # was it an integer literal (refused) or a float's (kept)? Python's parser says
        else:
            _refuse_wide(wide)
    if len(raw) > 2 * MAX_DEPTH:
        try:
            orjson.dumps(value)  # what the store does with it; fails only past MAX_DEPTH (7 us for 100 KB)
        except orjson.JSONEncodeError:
            _refuse_deep(value)
    return value


def parse_bytes(raw: bytes) -> int:
    """An upper bound on the memory parsing `raw` takes beyond `raw` itself, from its bytes alone (about 1 ns a byte):
    the text (twice its size for ASCII without `\\u` escapes: orjson's copy and the strings; five times otherwise,
    as one astral character makes a string four bytes a character) and `VALUE_BYTES` for each value. Every value
    but the first follows a `,` or a `:`, or opens an array or object or is the first in one (so each `{` and `[` is
    counted twice). Such characters inside strings are counted too (telling them apart costs a scan 5 to 30 times
    slower): code and prose have one in 20 to 50 bytes (a chat body of code is charged about 5 times its size),
    minified JSON or CSV in a string one in 4 to 10 (15 to 30 times)."""
    counted = raw.translate(None, _NOT_COUNTED)
    values = len(counted) + counted.count(b"{") + counted.count(b"[") + 1
    width = 2 if raw.isascii() and b"\\u" not in raw else 5
    return width * len(raw) + VALUE_BYTES * values


def _first_wide_float(value: Any) -> tuple[str | int, ...] | None:
    """The path of the first float at or past 2**63 in `value` (what orjson makes of an integer literal wider than
    it keeps), or None: a walk of the parsed value, not a second parse."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, float) and abs(node) >= WIDE:
            return path
        if isinstance(node, dict):
            stack.extend((item, (*path, key)) for key, item in node.items() if isinstance(item, dict | list | float))
        elif isinstance(node, list):
            stack.extend((item, (*path, i)) for i, item in enumerate(node) if isinstance(item, dict | list | float))
    return None


def _refuse_wide(path: tuple[str | int, ...]) -> None:
    field = ".".join(str(part) for part in path)
    raise BadRequest(f"{f'field {field!r}' if field else 'the body'} is a number of 2**63 or more in a body that has "
                     "a run of 19 digits: if it was written as an integer, it is outside the range the gateway stores "
                     f"exactly ({INT_MIN} to {INT_MAX}); send such numbers as strings", param=field or None)


def _parsed(raw: bytes) -> Any:
    """`orjson.loads` with the cyclic collector off: a parse allocates only acyclic containers, and a body of
    millions of small ones set off collection after collection, each scanning them all (an attack review's 32 MiB of
    `{}` held the event loop 5.2 s; about 1.9 s without)."""
    if not gc.isenabled():
        return orjson.loads(raw)
    gc.disable()
    try:
        return orjson.loads(raw)
    finally:
        gc.enable()


def check(raw: bytes) -> None:
    """BadRequest naming the first value of the JSON `raw` the store cannot keep exactly; nothing when there is none,
    or when `raw` is not JSON at all (the parser that reads it says so)."""
    with contextlib.suppress(NotJson):
        loads(raw)


def _refuse_unkept(raw: bytes) -> None:
    """BadRequest naming the first value of `raw` the store cannot keep; nothing when every value can be kept or
    Python's parser cannot read `raw` either."""
    try:
        value = json.loads(raw, parse_int=_integer, parse_float=_float, parse_constant=_constant)
    except (ValueError, RecursionError):  # not JSON (UnicodeDecodeError is a ValueError), or nested too deep
        return
    found = _first_unkept(value)
    if found is not None:
        path, problem = found
        field = ".".join(str(part) for part in path)
        raise BadRequest(f"{f'field {field!r}' if field else 'the body'} {problem}", param=field or None)


def _refuse_deep(value: Any) -> None:
    """BadRequest naming the first array or object nested deeper than MAX_DEPTH."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        node, path = stack.pop()
        if len(path) >= MAX_DEPTH:
            field = ".".join(str(part) for part in path)
            shown = field if len(field) <= 60 else f"{field[:60]}..."
            raise BadRequest(f"field {shown!r} is nested past {MAX_DEPTH} levels of arrays and objects, deeper than "
                             "the gateway stores; flatten it or send it as a string", param=field)
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        stack.extend(reversed([(item, (*path, key)) for key, item in items if isinstance(item, (dict, list))]))


def _integer(text: str) -> int | _Unkept:
    digits = text.lstrip("-")
    if len(digits) <= _MAX_INT_DIGITS and INT_MIN <= (number := int(text)) <= INT_MAX:
        return number
    shown = text if len(text) <= 40 else f"{text[:20]}...({len(digits)} digits)"
    return _Unkept(f"is the integer {shown}, outside the range the gateway stores exactly ({INT_MIN} to {INT_MAX}); "
                   "send it as a string")


def _float(text: str) -> float | _Unkept:
    number = float(text)
    if number - number == 0:  # finite
        return number
    return _Unkept(f"is the number {text[:40]}, past the range of a 64-bit float (it would be stored as Infinity); "
                   "send a smaller number or a string")


def _constant(text: str) -> _Unkept:
    return _Unkept(f"is {text}, which is not a JSON number (JSON has no NaN or Infinity); send null or a string")


_SURROGATE = ("holds a lone UTF-16 surrogate escape (\\ud800-\\udfff without its pair), which is not text; escape the "
              "character as a surrogate pair or send it as UTF-8")


def _first_unkept(value: Any) -> tuple[tuple[str | int, ...], str] | None:
    """(the path, the problem) of the first value, string or key the store cannot keep, in document order."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, _Unkept):
            return path, node.problem
        if isinstance(node, str) and not _is_text(node):
            return path, _SURROGATE
        if isinstance(node, dict):
            for key in node:
                if not _is_text(key):
                    return path, f"has a key that {_SURROGATE}"
            stack.extend(reversed([(item, (*path, key)) for key, item in node.items()]))
        elif isinstance(node, list):
            stack.extend(reversed([(item, (*path, index)) for index, item in enumerate(node)]))
    return None


def _is_text(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True
