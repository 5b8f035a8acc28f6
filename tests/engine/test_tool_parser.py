"""The tool-call parser table against our Hermes parser (whole and streamed) and against vLLM's own hermes parser."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import textwrap

import pytest

from engines.serving.tool_parser import (
    END_TAG,
    START_TAG,
    ToolCallStream,
    parse_tool_calls,
    partial_prefix_length,
)
from engines.vllm import DEFAULT_VLLM_PYTHON
from tests.engine.tool_call_cases import CASES, ToolCallCase


def ids():
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_table_against_our_parser(case: ToolCallCase) -> None:
    parsed = parse_tool_calls(case.text, ids())
    assert parsed.content == case.content
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == list(case.calls)
    assert [c.id for c in parsed.tool_calls] == [f"call_{i}" for i in range(len(case.calls))]
    assert parsed.parse_failures == case.failures


def stream_pieces(text: str, pieces: list[str]) -> tuple[list[str], ToolCallStream]:
    stream = ToolCallStream(ids())
    released = [stream.feed(piece).content for piece in pieces]
    released.append(stream.finish().content)
    return released, stream


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("width", [1, 3, 7])
def test_streaming_in_any_split_equals_the_whole_parse(case: ToolCallCase, width: int) -> None:
    pieces = [case.text[i:i + width] for i in range(0, len(case.text), width)]
    released, stream = stream_pieces(case.text, pieces)
    whole = parse_tool_calls(case.text, ids())
    assert stream.result() == whole
    assert "".join(released) == (whole.content or "")


def test_text_that_may_start_a_tag_is_held_back_until_settled() -> None:
    stream = ToolCallStream(ids())
    assert stream.feed("Sure <tool").content == "Sure"
    assert stream.feed("box> ok").content == " <toolbox> ok"
    step = stream.feed(f" {START_TAG}")
    assert step.content == "" and not step.tool_calls
    step = stream.feed('{"name": "f", "arguments": {}}')
    assert step.content == "" and not step.tool_calls
    step = stream.feed(END_TAG + "\nafter")
    assert [c.name for c in step.tool_calls] == ["f"] and step.content == "after"


def test_a_bad_block_is_released_as_text_and_counted_when_it_closes() -> None:
    stream = ToolCallStream(ids())
    assert stream.feed(f"x {START_TAG}{{oops").content == "x"
    step = stream.feed(END_TAG)
    assert step.parse_failures == 1 and step.content == f" {START_TAG}{{oops{END_TAG}" and not step.tool_calls


def test_an_open_bad_block_at_the_end_is_text() -> None:
    stream = ToolCallStream(ids())
    stream.feed(f"{START_TAG}{{\"name\": ")
    step = stream.finish()
    assert step.parse_failures == 1 and step.content == f'{START_TAG}{{"name": '


def test_partial_prefix_length() -> None:
    assert partial_prefix_length("abc<tool_", START_TAG) == 6
    assert partial_prefix_length("abc<", START_TAG) == 1
    assert partial_prefix_length("abc", START_TAG) == 0
    assert partial_prefix_length("<tool_call>", START_TAG) == 0


VLLM_TABLE_SCRIPT = textwrap.dedent("""
    import json, sys
    from unittest.mock import MagicMock
    from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser
    tokenizer = MagicMock()
    tokenizer.get_vocab.return_value = {"<tool_call>": 1, "</tool_call>": 2}
    parser = Hermes2ProToolParser(tokenizer)
    answers = []
    for text in json.load(sys.stdin):
        info = parser.extract_tool_calls(text, request=None)
        answers.append({"content": info.content,
                        "calls": [[c.function.name, c.function.arguments] for c in info.tool_calls]})
    json.dump(answers, sys.stdout)
""")


@pytest.mark.e2e
def test_table_against_vllms_hermes_parser() -> None:
    if not DEFAULT_VLLM_PYTHON.is_file() and os.environ.get("HARNESSRL_REQUIRE_VLLM") != "1":
        pytest.skip(f"no vLLM virtualenv at {DEFAULT_VLLM_PYTHON}; run `make vllm-venv` to compare with vLLM")
    run = subprocess.run([str(DEFAULT_VLLM_PYTHON), "-c", VLLM_TABLE_SCRIPT],
                         input=json.dumps([c.text for c in CASES]), capture_output=True, text=True, timeout=300,
                         env={"VLLM_NO_USAGE_STATS": "1", "PATH": "/usr/bin:/bin", "VLLM_LOGGING_LEVEL": "ERROR"})
    assert run.returncode == 0, run.stderr[-3000:]
    answers = json.loads(run.stdout.strip().splitlines()[-1])
    for case, answer in zip(CASES, answers, strict=True):
        expected = case.vllm or case
        assert answer["content"] == expected.content, case.name
        assert [tuple(c) for c in answer["calls"]] == list(expected.calls), case.name
