"""`strict_json.parse_bytes` bounds what a parse really takes: for bodies of every shape (text, tiny containers,
short strings, escapes, wide characters, numbers), the peak memory a fresh process gains parsing the body (its
resident set's high-water mark, read before and after) stays under the bound, and an honest chat body is charged a
small multiple of its size; an engine's answer (its shape the engine's) parses within the proxy's
`ANSWER_PARSE_TIMES`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from gateway import strict_json
from gateway.proxy import ANSWER_PARSE_TIMES
from gateway.strict_json import VALUE_BYTES, parse_bytes

N = 300_000
CODE = (Path(strict_json.__file__).parent / "store.py").read_text()  # a harness's conversation: source code


def _list(item: bytes) -> bytes:
    return b"[" + b",".join([item] * N) + b"]"


SHAPES = {
    "ascii text": orjson.dumps("x" * 8_000_000),
    "text with one astral character": orjson.dumps("x" * 8_000_000 + "\U0001f600"),
    "text with an escaped astral character": b'"' + b"x" * 8_000_000 + b'\\ud83d\\ude00"',
    "empty objects": _list(b"{}"),
    "empty arrays": _list(b"[]"),
    "one-key objects": _list(b'{"a":0}'),
    "nested one-key objects": _list(b'{"a":[{}]}'),
    "two-letter strings": _list(b'"ab"'),
    "distinct short strings": b"[" + b",".join(b'"%x"' % i for i in range(N)) + b"]",
    "escaped astral strings": _list(b'"\\ud83d\\ude00a"'),
    "wide short strings": _list('"\U0001f600a"'.encode()),
    "one big object": b"{" + b",".join(b'"%d":0' % i for i in range(N)) + b"}",
    "integers": _list(b"100000"),
    "floats": _list(b"1.5"),
    "chat of code": orjson.dumps({"model": "m", "messages": [{"role": "user", "content": CODE}] * 40}),
}

MEASURE = """
import gc, resource, sys
import orjson
raw = open(sys.argv[1], "rb").read()
gc.disable()
resident = int(open("/proc/self/statm").read().split()[1]) * 4096
before = max(resident, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
value = orjson.loads(raw)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before)
"""


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_bound_covers_the_peak_memory_of_a_parse(shape: str, tmp_path) -> None:
    raw = SHAPES[shape]
    (tmp_path / "body.json").write_bytes(raw)
    done = subprocess.run([sys.executable, "-c", MEASURE, str(tmp_path / "body.json")], capture_output=True,
                          text=True, check=True)
    peak_bytes = int(done.stdout)
    assert peak_bytes <= parse_bytes(raw), (shape, peak_bytes / len(raw), parse_bytes(raw) / len(raw))


@pytest.mark.parametrize(("raw", "values"), [
    (b"0", 1), (b"[]", 3), (b"{}", 3), (b"[1,2,3]", 5), (b'{"a":1,"b":[2]}', 8), (b'"a,b:{c}[d]"', 7),
])
def test_values_are_counted_from_the_bytes_alone_over_counting_inside_strings(raw: bytes, values: int) -> None:
    assert parse_bytes(raw) == 2 * len(raw) + VALUE_BYTES * values


def test_text_that_may_widen_is_charged_five_times_its_size() -> None:
    for raw in (orjson.dumps("é" * 10), b'"\\u00e9"'):
        assert parse_bytes(raw) - VALUE_BYTES == 5 * len(raw)


def test_a_chat_body_of_code_is_charged_a_small_multiple_of_its_size() -> None:
    body = SHAPES["chat of code"]
    assert parse_bytes(body) < 6 * len(body)


def _engine_answer(tokens: int, alternatives: int) -> bytes:
    """A chat answer in the engine's shape: prompt token ids, and per token its logprob and `alternatives`."""
    content = [{"token": f"t{i}", "logprob": -0.01 * i, "bytes": [116, 48 + i % 10],
                "top_logprobs": [{"token": f"a{j}", "logprob": -1.5 - j, "bytes": [97, 48 + j % 10]}
                                 for j in range(alternatives)]} for i in range(tokens)]
    return orjson.dumps({"id": "x", "object": "chat.completion", "model": "m",
                         "prompt_token_ids": list(range(1000, 1000 + 4 * tokens)),
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": "t" * tokens},
                                      "logprobs": {"content": content}, "finish_reason": "length"}]})


@pytest.mark.parametrize(("tokens", "alternatives"), [(60_000, 0), (8_000, 20)])
def test_an_engine_answer_parses_within_the_proxys_factor(tokens: int, alternatives: int, tmp_path) -> None:
    raw = _engine_answer(tokens, alternatives)
    (tmp_path / "answer.json").write_bytes(raw)
    done = subprocess.run([sys.executable, "-c", MEASURE, str(tmp_path / "answer.json")], capture_output=True,
                          text=True, check=True)
    assert int(done.stdout) <= ANSWER_PARSE_TIMES * len(raw), int(done.stdout) / len(raw)
