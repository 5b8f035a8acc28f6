"""Versioned splits: written, published to a local directory or a moto S3 server, fetched and read back exactly."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from recipes.swe.splits import (
    MANIFEST_FILE,
    TRAIN_FILE,
    SplitError,
    fetch_splits,
    publish_splits,
    read_splits,
    split_store_root,
    write_splits,
)
from storage.directory_store import directory_store
from storage.errors import StoreError

TRAIN = [{"instance_id": f"t{i}", "problem_statement": f"bug {i} ✓", "FAIL_TO_PASS": ["a::b"], "PASS_TO_PASS": [],
          "base_commit": None, "source": "swe-smith"} for i in range(5)]
VAL = [{"instance_id": "v0", "problem_statement": "held out", "FAIL_TO_PASS": ["c::d"], "PASS_TO_PASS": ["e::f"],
        "base_commit": "abc", "source": "swe-smith"}]
RECIPE = {"name": "swe-smith", "seed": 3, "k": 4, "sizes": {"n_mixed": 5, "n_unsolved": 1, "n_heldout": 1},
          "sources": ["SWE-bench/SWE-smith"], "steps": {"drop_empty_statements": {"in": 9, "kept": 8, "dropped": 1}},
          "difficulty": {"probed": 8, "solved": 2, "mixed": 5, "unsolved": 1}, "params": {"model": "tiny"}}


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path: Path):
    if request.param == "local":
        return directory_store((tmp_path / "store").as_uri())
    return directory_store(f"s3://splits-{uuid.uuid4().hex[:12]}/data/v1", request.getfixturevalue("s3_endpoint"))


def test_manifest_records_counts_and_the_version_is_the_content(tmp_path):
    folder, manifest = write_splits(tmp_path / "a", TRAIN, VAL, **RECIPE)
    assert folder == tmp_path / "a" / manifest.version and len(manifest.version) == 16
    assert (manifest.n_train, manifest.n_val, manifest.seed, manifest.k) == (5, 1, 3, 4)
    assert manifest.steps == RECIPE["steps"] and manifest.difficulty == RECIPE["difficulty"]
    assert json.loads((folder / MANIFEST_FILE).read_text())["sources"] == ["SWE-bench/SWE-smith"]
    _, same = write_splits(tmp_path / "b", list(TRAIN), list(VAL), **RECIPE)
    assert same.version == manifest.version  # created_at differs; the version does not
    _, other_seed = write_splits(tmp_path / "c", TRAIN, VAL, **{**RECIPE, "seed": 4})
    _, other_rows = write_splits(tmp_path / "d", TRAIN[:4], VAL, **RECIPE)
    assert len({manifest.version, other_seed.version, other_rows.version}) == 3


def test_published_splits_round_trip_exactly(store, tmp_path):
    folder, manifest = write_splits(tmp_path / "local", TRAIN, VAL, **RECIPE)
    uri = publish_splits(folder, store)
    assert uri.endswith(f"/swe-smith/{manifest.version}")
    assert publish_splits(folder, store) == uri  # the same version is not uploaded twice
    back = fetch_splits(store, uri, tmp_path / "fetched")
    assert back.train == TRAIN and back.val == VAL
    assert back.manifest == manifest


def test_fetching_the_same_splits_twice_reuses_the_first_copy(store, tmp_path):
    """A resumed train-swe run fetches its `splits:` source again into `run_dir/splits`."""
    folder, _ = write_splits(tmp_path / "local", TRAIN, VAL, **RECIPE)
    uri = publish_splits(folder, store)
    first = fetch_splits(store, uri, tmp_path / "run" / "splits")
    (tmp_path / "run" / "splits" / "sentinel.txt").write_text("left by the first fetch")
    assert fetch_splits(store, uri, tmp_path / "run" / "splits") == first
    assert (tmp_path / "run" / "splits" / "sentinel.txt").is_file()  # not downloaded again
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["splits"]  # no staging left
    other = publish_splits(write_splits(tmp_path / "b", TRAIN, VAL, **{**RECIPE, "seed": 4})[0], store)
    with pytest.raises(StoreError, match=r"splits already exists but holds another folder .*remove it or download"):
        fetch_splits(store, other, tmp_path / "run" / "splits")


def test_altered_or_incomplete_folders_are_refused(tmp_path):
    folder, _ = write_splits(tmp_path / "local", TRAIN, VAL, **RECIPE)
    (folder / TRAIN_FILE).write_text((folder / TRAIN_FILE).read_text().replace("bug 1", "bug one"))
    with pytest.raises(SplitError, match="does not match the sha256"):
        read_splits(folder)
    (folder / MANIFEST_FILE).unlink()
    with pytest.raises(SplitError, match="has no manifest.json"):
        read_splits(folder)
    with pytest.raises(SplitError, match="has no manifest.json"):
        publish_splits(folder, directory_store((tmp_path / "store").as_uri()))
    with pytest.raises(SplitError, match="in both train and val"):
        write_splits(tmp_path / "overlap", TRAIN, TRAIN[:1], **RECIPE)


def test_the_store_root_of_a_published_split(tmp_path):
    store = directory_store((tmp_path / "store").as_uri())
    folder, _ = write_splits(tmp_path / "out", TRAIN, VAL, **RECIPE)
    uri = publish_splits(folder, store)
    assert split_store_root(uri) == (tmp_path / "store").as_uri()
    assert split_store_root("s3://bucket/splits/swe-smith/v-1/") == "s3://bucket/splits"
    with pytest.raises(ValueError, match="not a published split's URI"):
        split_store_root("swe-smith/v-1")
