"""flatten_params: dotted keys, leaf rendering, truncation, collisions."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import BaseModel

from tracking.tracker import (
    MAX_PARAM_VALUE_CHARS,
    TRUNCATION_MARKER,
    flatten_params,
    truncate_value,
)


@dataclass(frozen=True)
class Loss:
    clip: float = 0.2
    kind: str = "ppo"


class Section(BaseModel):
    lr: float = 1e-6
    dirs: list[Path] = [Path("/a"), Path("b")]


@pytest.mark.parametrize(("params", "expected"), [
    ({}, {}),
    ({"a": 1}, {"a": "1"}),
    ({"a": {"b": {"c": 2.5}}}, {"a.b.c": "2.5"}),
    ({"a": {"b": 1, "c": "x"}, "d": True}, {"a.b": "1", "a.c": "x", "d": "True"}),
    ({"a": None}, {"a": "None"}),
    ({"a": {}}, {"a": "{}"}),
    ({"a": [1, "two", 3.0]}, {"a": '[1, "two", 3.0]'}),
    ({"a": (1, 2)}, {"a": "[1, 2]"}),
    ({"a": []}, {"a": "[]"}),
    ({"a": {"z", "y"}}, {"a": '["y", "z"]'}),
    ({"a": Path("/tmp/x")}, {"a": "/tmp/x"}),
    ({"a": [Path("/tmp/x")]}, {"a": '["/tmp/x"]'}),
    ({"a": [{"b": 1}]}, {"a": '[{"b": 1}]'}),
    ({1: "int key"}, {"1": "int key"}),
    ({"loss": Loss()}, {"loss.clip": "0.2", "loss.kind": "ppo"}),
    (Loss(), {"clip": "0.2", "kind": "ppo"}),
    ({"s": Section()}, {"s.lr": "1e-06", "s.dirs": '["/a", "b"]'}),
])
def test_flatten_params_table(params, expected) -> None:
    assert flatten_params(params) == expected


def test_prefix_and_scalar_leaf() -> None:
    assert flatten_params({"b": 1}, prefix="cfg") == {"cfg.b": "1"}
    assert flatten_params(3, prefix="seed") == {"seed": "3"}


def test_scalar_without_prefix_is_an_error() -> None:
    with pytest.raises(TypeError, match="prefix"):
        flatten_params(3)


def test_long_values_are_cut_to_mlflows_limit_with_a_marker() -> None:
    flat = flatten_params({"prompt": "x" * (MAX_PARAM_VALUE_CHARS + 1), "ok": "y" * MAX_PARAM_VALUE_CHARS})
    assert len(flat["prompt"]) == MAX_PARAM_VALUE_CHARS
    assert flat["prompt"].endswith(TRUNCATION_MARKER)
    assert flat["ok"] == "y" * MAX_PARAM_VALUE_CHARS


def test_truncate_value_edges() -> None:
    assert truncate_value("abc", 3) == "abc"
    assert truncate_value("x" * 20, len(TRUNCATION_MARKER)) == TRUNCATION_MARKER
    with pytest.raises(ValueError, match="max_chars"):
        truncate_value("x" * 20, 2)


def test_colliding_dotted_keys_are_an_error() -> None:
    with pytest.raises(ValueError, match="'a.b' appears twice"):
        flatten_params({"a.b": 1, "a": {"b": 2}})
