"""strict_json: one rule for every stored body - a value the store cannot keep exactly is a 400 naming its field."""

from __future__ import annotations

import contextlib
import gc
import json

import orjson
import pytest

from gateway import strict_json
from gateway.errors import BadRequest
from gateway.strict_json import INT_MAX, INT_MIN, MAX_DEPTH, NotJson, check, is_integer, loads


@pytest.mark.parametrize(("raw", "field", "words"), [
    (b'{"a": [1, {"b": 123456789012345678901234}]}', "a.1.b", "the integer 123456789012345678901234"),
    (b'{"a": 18446744073709551616}', "a", "outside the range"),
    (b'{"a": -9223372036854775809}', "a", "outside the range"),
    (b'{"x": NaN}', "x", "NaN, which is not a JSON number"),
    (b'{"x": {"y": -Infinity}}', "x.y", "-Infinity"),
    (b'{"x": 1e400}', "x", "past the range of a 64-bit float"),
    (b'{"s": "\\ud800"}', "s", "lone UTF-16 surrogate"),
    (b'{"k": {"\\udc00": 1}}', "k", "has a key that holds a lone UTF-16 surrogate"),
    (b"[0, NaN]", "1", "NaN"),
    (b"1" + b"0" * 5000, None, "(5001 digits)"),
])
def test_a_value_the_store_cannot_keep_is_refused_naming_its_field(raw, field, words) -> None:
    with pytest.raises(BadRequest) as refused:
        loads(raw)
    assert (type(refused.value), refused.value.param, words in refused.value.message) == (BadRequest, field, True)
    with pytest.raises(BadRequest):
        check(raw)


@pytest.mark.parametrize("raw", [b'{"top": 18446744073709551615, "bottom": -9223372036854775808}',
                                 b'{"text": "12345678901234567890123 digits in a string", "f": 0.000340316431377329}',
                                 b'{"emoji": "\\ud83d\\ude00", "big float": 1e308, "e": 1.5e-300}', b'[]'])
def test_what_the_store_keeps_is_parsed_as_orjson_parses_it(raw) -> None:
    assert loads(raw) == orjson.loads(raw) == json.loads(raw)
    check(raw)
    assert orjson.loads(orjson.dumps(loads(raw))) == json.loads(raw)  # stored and read back unchanged


def test_nesting_past_what_orjson_writes_is_refused_naming_the_field() -> None:
    loads(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH)
    with pytest.raises(BadRequest, match=f"nested past {MAX_DEPTH} levels") as refused:
        loads(b'{"a": [1, {"b": ' + b"[" * MAX_DEPTH + b"]" * MAX_DEPTH + b"}]}")
    assert refused.value.param == "a.1.b" + ".0" * (MAX_DEPTH - 3)
    with pytest.raises(NotJson):  # past orjson's own parsing depth: not JSON it reads
        loads(b"[" * 1100 + b"]" * 1100)


def test_a_body_that_is_not_json_is_not_json_and_check_leaves_it_to_the_parser() -> None:
    with pytest.raises(NotJson, match="not valid JSON"):
        loads(b'{"a": ')
    check(b'{"a": ')
    check(b"name=policy")


@pytest.mark.parametrize(("value", "integer"), [(2, True), (2.0, True), (-0.0, True), (2.5, False), (True, False),
                                                ("2", False), (None, False), (float(INT_MAX) * 2, False),
                                                (INT_MIN, True), (1e300, False)])
def test_a_json_integer_is_a_whole_number_however_written(value, integer) -> None:
    assert is_integer(value) is integer


@pytest.mark.parametrize("raw", [b'{"a": [{}, {}]}', b"{not json"])
def test_the_parse_runs_with_the_cyclic_collector_off_and_turns_it_back_on(monkeypatch, raw):
    """A body of millions of small containers set off collection after collection during the parse."""
    seen = []
    real = strict_json.orjson.loads

    def loads(data):
        seen.append(gc.isenabled())
        return real(data)

    monkeypatch.setattr(strict_json.orjson, "loads", loads)
    with contextlib.suppress(Exception):
        strict_json.loads(raw)
    assert seen[0] is False and gc.isenabled()


def _no_second_parse(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the body was parsed a second time")
    monkeypatch.setattr(strict_json.json, "loads", refuse)


def test_a_large_body_with_a_run_of_digits_in_a_string_is_not_parsed_twice(monkeypatch):
    """An attack review's 2.6 MB body with one 19-digit number in its text was parsed again by Python's parser (1.7
    times its charge, 3 s of the event loop for four rollouts): now the parsed value is walked instead."""
    body = orjson.dumps({"messages": [{"role": "user", "content": "order 1234567890123456789 " + "x" * 300_000}]})
    _no_second_parse(monkeypatch)
    assert strict_json.loads(body)["messages"][0]["content"].startswith("order 1234567890123456789")


def test_a_large_body_with_an_integer_past_the_range_is_refused_naming_it_without_a_second_parse(monkeypatch):
    body = b'{"pad": "' + b"x" * 300_000 + b'", "ids": [1, 18446744073709551616]}'
    _no_second_parse(monkeypatch)
    with pytest.raises(BadRequest) as refused:
        strict_json.loads(body)
    assert refused.value.param == "ids.1" and "send such numbers as strings" in refused.value.message


def test_a_large_body_that_is_not_json_is_refused_from_orjsons_message(monkeypatch):
    body = b'{"pad": "' + b"x" * 300_000 + b'", "n": NaN}'
    _no_second_parse(monkeypatch)
    with pytest.raises(strict_json.NotJson):
        strict_json.loads(body)
