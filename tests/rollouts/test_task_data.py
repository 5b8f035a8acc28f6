"""Task rows through `datasets`: generated and local sources round-trip exactly, hub errors, deterministic splits."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import huggingface_hub.constants
import pytest

import recipes.swe.recipe as swe_recipe
from controller.recipes import get_recipe
from recipes.swe.generator import generate as generate_instances
from recipes.swe.recipe import SweRecipe
from rollouts.task_data import (
    JSON_SUFFIX,
    TaskDataError,
    decode_rows,
    encode_rows,
    load_task_rows,
    split_rows,
    write_task_rows,
)
from tests.recipes.swe.conftest import write_tiny_project


def with_recipe(rows: list[dict], recipe: str) -> list[dict]:
    return [{**row, "recipe": recipe} for row in rows]


@pytest.fixture(scope="module")
def swe_store(tmp_path_factory) -> tuple[Path, Path]:
    """(tiny project, store holding two SWE-smith instances generated from it)."""
    project = write_tiny_project(tmp_path_factory.mktemp("src") / "tinymath")
    store = tmp_path_factory.mktemp("store")
    generate_instances(str(project), store, count=2, seed=0)
    return project, store


@pytest.mark.parametrize("recipe", ["instruction_following", "search"])
def test_generated_rows_round_trip_exactly(recipe, tmp_path):
    rows = load_task_rows("generated", recipe=recipe, count=40, seed=7, cache_dir=tmp_path)
    assert rows == with_recipe(get_recipe(recipe).generate(40, 7), recipe)
    assert list((tmp_path / "generated").glob("*.jsonl")), "generated rows go through a JSONL file"


def test_generated_rows_are_read_back_not_generated_again(tmp_path, monkeypatch):
    """A resumed run (same cache folder) reads its generated file: a SWE recipe would download and test again."""
    first = load_task_rows("generated", recipe="search", count=5, seed=1, cache_dir=tmp_path)
    recipe = get_recipe("search")
    monkeypatch.setattr(type(recipe), "generate", lambda *_: pytest.fail("generated again"))
    assert load_task_rows("generated", recipe="search", count=5, seed=1, cache_dir=tmp_path) == first


def test_generated_swe_rows_round_trip_exactly(swe_store, tmp_path, monkeypatch):
    project, store = swe_store
    monkeypatch.setattr(swe_recipe, "RECIPE", SweRecipe(store=store, source=str(project)))
    rows = load_task_rows("generated", recipe="swe", count=2, seed=0, cache_dir=tmp_path)
    assert rows == with_recipe(SweRecipe(store=store, source=str(project)).generate(2, 0), "swe")


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_swe_smith_instances_round_trip_through_written_files(swe_store, suffix, tmp_path):
    _, store = swe_store
    instances = [json.loads(line) for line in (store / "instances.jsonl").read_text().splitlines()]
    assert all(isinstance(i["FAIL_TO_PASS"], list) and i["FAIL_TO_PASS"] for i in instances)
    path = write_task_rows(with_recipe(instances, "swe"), tmp_path / f"instances{suffix}")
    assert load_task_rows(str(path), recipe="swe", count=None, seed=0, cache_dir=tmp_path) == with_recipe(
        instances, "swe")


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_written_files_round_trip_heterogeneous_and_mixed_values(suffix, tmp_path):
    rows = [{"id": "a", "meta": {"x": 1}, "value": 1, "tags": ["p"], "at": "2026-11-29T22:33:48+00:00"},
            {"id": "b", "meta": {"y": "s", "z": [1, "two", None]}, "value": 1.5, "tags": [], "at": "2026-01-02"},
            {"id": "c", "meta": {}, "value": "three", "tags": [{"k": 1}, "loose"], "at": "2026-03-04 05:06"}]
    path = write_task_rows(rows, tmp_path / f"rows{suffix}")
    loaded = load_task_rows(str(path), recipe="search", count=None, seed=0, cache_dir=tmp_path)
    assert loaded == with_recipe(rows, "search")
    assert type(loaded[0]["value"]) is int and type(loaded[1]["value"]) is float


def test_encoding_touches_only_nested_mixed_or_date_like_columns():
    rows = [{"id": "a", "n": 1, "nested": [1], "mixed": 1, "at": "2026-11-29T22:33:48+00:00"},
            {"id": "b", "n": 2, "nested": None, "mixed": "x", "at": "later"}]
    encoded = encode_rows(rows)
    assert set(encoded[0]) == {"id", "n", f"nested{JSON_SUFFIX}", f"mixed{JSON_SUFFIX}", f"at{JSON_SUFFIX}"}
    assert encoded[1][f"nested{JSON_SUFFIX}"] == "null" and encoded[0][f"mixed{JSON_SUFFIX}"] == "1"
    assert decode_rows(encoded) == rows


def test_a_json_column_holding_no_text_is_refused():
    with pytest.raises(TaskDataError, match=f"'tags{JSON_SUFFIX}'.*json.dumps"):
        decode_rows([{f"tags{JSON_SUFFIX}": ["a"]}])


@pytest.mark.parametrize("layout", ["json_array", "jsonl", "parquet", "directory"])
def test_local_sources_load_every_row_with_nested_values(layout, tmp_path):
    rows = with_recipe(get_recipe("instruction_following").generate(12, 3), "instruction_following")
    if layout == "json_array":
        source = tmp_path / "tasks.json"
        source.write_text(json.dumps(rows))
    elif layout == "directory":
        source = tmp_path / "tasks"
        write_task_rows(rows[:5], source / "part-0.jsonl")
        write_task_rows(rows[5:], source / "part-1.jsonl")
    else:
        source = write_task_rows(rows, tmp_path / f"tasks.{layout}")
    assert load_task_rows(str(source), recipe="instruction_following", count=None, seed=0,
                          cache_dir=tmp_path / "cache") == rows


def test_count_truncates_and_a_row_keeps_its_own_recipe(tmp_path):
    rows = [{"id": f"t{i}", "question": "q", "recipe": "other" if i == 1 else None} for i in range(5)]
    path = write_task_rows(rows, tmp_path / "rows.jsonl")
    loaded = load_task_rows(str(path), recipe="search", count=3, seed=0, cache_dir=tmp_path)
    assert [(r["id"], r["recipe"]) for r in loaded] == [("t0", "search"), ("t1", "other"), ("t2", "search")]
    assert len(load_task_rows(str(path), recipe="search", count=50, seed=0, cache_dir=tmp_path)) == 5


def test_directory_mixing_parquet_and_json_is_refused(tmp_path):
    write_task_rows([{"id": "a"}], tmp_path / "d" / "a.jsonl")
    write_task_rows([{"id": "b"}], tmp_path / "d" / "b.parquet")
    with pytest.raises(TaskDataError, match="mixes parquet and JSON"):
        load_task_rows(str(tmp_path / "d"), recipe="search", count=None, seed=0, cache_dir=tmp_path)


@pytest.mark.parametrize("source", ["missing/tasks.jsonl", "./missing-dir"])
def test_missing_local_paths_name_the_path(source, tmp_path):
    with pytest.raises(TaskDataError, match="does not exist"):
        load_task_rows(source, recipe="search", count=None, seed=0, cache_dir=tmp_path)


def test_generated_rows_need_a_count(tmp_path):
    with pytest.raises(TaskDataError, match="need a count"):
        load_task_rows("generated", recipe="search", count=None, seed=0, cache_dir=tmp_path)


def test_unreachable_hub_dataset_names_the_id_and_says_to_pass_a_local_path(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(TaskDataError, match=r"'nobody/no-such-tasks' \(split 'validation'\).*pass a local path"):
        load_task_rows("nobody/no-such-tasks:validation", recipe="search", count=None, seed=0, cache_dir=tmp_path)


@pytest.mark.parametrize(("source", "dataset_id", "split"), [("org/tasks", "org/tasks", "train"),
                                                             ("org/tasks:test", "org/tasks", "test")])
def test_hub_ids_take_an_optional_split(source, dataset_id, split, tmp_path, monkeypatch):
    calls = []

    def fake_load_dataset(name, **kwargs):
        calls.append((name, kwargs["split"]))
        return datasets.Dataset.from_list([{"id": "h0", f"answers{JSON_SUFFIX}": '["x"]'}])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    rows = load_task_rows(source, recipe="search", count=None, seed=0, cache_dir=tmp_path)
    assert calls == [(dataset_id, split)]
    assert rows == [{"id": "h0", "answers": ["x"], "recipe": "search"}]


def test_split_is_deterministic_disjoint_and_complete():
    rows = [{"id": f"t{i}"} for i in range(30)]
    train, val = split_rows(rows, val_count=8, seed=1)
    assert (train, val) == split_rows(rows, val_count=8, seed=1)
    assert len(val) == 8 and len(train) == 22
    assert {r["id"] for r in train}.isdisjoint(r["id"] for r in val)
    assert sorted(r["id"] for r in train + val) == sorted(r["id"] for r in rows)
    assert train == [r for r in rows if r in train], "both parts keep the rows' order"
    assert split_rows(rows, val_count=8, seed=2)[1] != val
    assert split_rows(rows, val_count=0, seed=1) == (rows, [])


@pytest.mark.parametrize("val_count", [-1, 30, 31])
def test_split_refuses_counts_that_leave_no_training_rows(val_count):
    with pytest.raises(ValueError, match=f"got {val_count}"):
        split_rows([{"id": f"t{i}"} for i in range(30)], val_count=val_count, seed=0)
