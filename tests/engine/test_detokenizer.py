"""ChoiceText: stop strings cut the text, streaming holds back possible stop prefixes and broken UTF-8."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engines.serving.detokenizer import ChoiceText

VOCAB = {i: chr(ord("a") + i) for i in range(26)} | {26: " ", 27: "\ufffd", 28: ""}


def decode(ids: list[int]) -> str:
    """One character per token; 27 stands for an incomplete UTF-8 byte; 28 for a skipped special token."""
    text = "".join(VOCAB[i] for i in ids)
    return text.replace("\ufffdd", "é")  # token 27 followed by 'd' completes a two-byte character


def ids(text: str) -> list[int]:
    return [26 if ch == " " else ord(ch) - ord("a") for ch in text]


@pytest.mark.parametrize(("generated", "stops", "include", "text", "stop"), [
    ("hello world", (), False, "hello world", None),
    ("hello world", ("wor",), False, "hello ", "wor"),
    ("hello world", ("wor",), True, "hello wor", "wor"),
    ("hello world", ("o w", "ll"), False, "he", "ll"),
    ("hello world", ("xyz",), False, "hello world", None),
])
def test_stop_strings_cut_the_text(generated: str, stops: tuple[str, ...], include: bool, text: str,
                                   stop: str | None) -> None:
    choice = ChoiceText(decode, stops, include)
    for token in ids(generated):
        if choice.append(token) is not None:
            break
    assert choice.text == text
    assert choice.matched_stop == stop


def test_streaming_holds_back_possible_stop_prefixes_and_ends_complete() -> None:
    choice = ChoiceText(decode, ("xyz",))
    deltas = []
    for token in ids("abcxyq"):
        choice.append(token)
        deltas.append(choice.take_delta(final=False))
    assert "".join(deltas) == "abcx", "the last two characters could still start 'xyz'"
    assert "".join(deltas) + choice.take_delta(final=True) == "abcxyq"


def test_incomplete_utf8_is_held_back_until_completed() -> None:
    choice = ChoiceText(decode, ())
    choice.append(0)
    assert choice.take_delta(final=False) == "a"
    choice.append(27)
    assert choice.take_delta(final=False) == ""
    choice.append(3)
    assert choice.take_delta(final=False) == "é"


@given(st.text(alphabet="abc ", max_size=30), st.lists(st.text(alphabet="abc", min_size=1, max_size=3),
                                                       max_size=2))
def test_stream_deltas_concatenate_to_the_final_text(generated: str, stops: list[str]) -> None:
    choice = ChoiceText(decode, tuple(stops))
    streamed = ""
    for token in ids(generated):
        stopped = choice.append(token) is not None
        streamed += choice.take_delta(final=stopped)
        if stopped:
            break
    streamed += choice.take_delta(final=True)
    assert streamed == choice.text
    assert not any(stop in choice.text for stop in stops)
