"""flatten_params: dotted keys, leaf rendering, truncation, collisions; the Tracker seam's MemoryTracker."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import BaseModel

from trainer.tracking import (
    MAX_PARAM_VALUE_CHARS,
    TRUNCATION_MARKER,
    MemoryTracker,
    Tracker,
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


def test_memory_tracker_records_everything() -> None:
    tracker = MemoryTracker()
    assert isinstance(tracker, Tracker)
    tracker.log_params({"algo": {"lr": 0.1}})
    tracker.log_params({"algo": {"lr": 0.1}})  # same value again is fine (a resumed run)
    tracker.log_metrics({"loss": 2, "reward": 0.5}, step=0)
    tracker.log_metrics({"loss": 1.5}, step=1)
    tracker.log_text("# hi", "trajectories/step-000001.md")
    tracker.log_dict({"k": [1, 2]}, "trajectories/step-000001.json")
    tracker.set_tags({"recipe": "swe"})
    tracker.end("FAILED")
    assert tracker.params == {"algo.lr": "0.1"}
    assert tracker.history("loss") == [(0, 2.0), (1, 1.5)]
    assert tracker.history("reward") == [(0, 0.5)]
    assert tracker.texts == {"trajectories/step-000001.md": "# hi"}
    assert tracker.dicts == {"trajectories/step-000001.json": {"k": [1, 2]}}
    assert tracker.tags == {"recipe": "swe"} and tracker.status == "FAILED"


@pytest.mark.parametrize(("call", "match"), [
    (lambda t: t.log_params({"algo": {"lr": 0.2}}), "keeps its first value"),
    (lambda t: t.log_metrics({"loss": "low"}, 0), "non-numeric"),
    (lambda t: t.log_text("x", "/abs.md"), "relative path"),
    (lambda t: t.log_dict({}, "../up.json"), "relative path"),
    (lambda t: t.end("DONE"), "not one of"),
    (lambda t: t.history("nope"), "never logged"),
])
def test_memory_tracker_refuses_what_mlflow_refuses(call, match) -> None:
    tracker = MemoryTracker()
    tracker.log_params({"algo": {"lr": 0.1}})
    with pytest.raises((ValueError, KeyError), match=match):
        call(tracker)
