"""Versioned splits: written, published to a local directory or a moto S3 server, fetched and read back exactly."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from agents.swe.splits import (
    MANIFEST_FILE,
    TRAIN_FILE,
    SplitError,
    fetch_splits,
    publish_splits,
    read_splits,
    write_splits,
)
from trainer.object_store import ObjectStoreError, directory_store_from_uri

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
        return directory_store_from_uri((tmp_path / "store").as_uri())
    return directory_store_from_uri(f"s3://splits-{uuid.uuid4().hex[:12]}/data/v1",
                                    request.getfixturevalue("s3_endpoint"))


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
    with pytest.raises(ObjectStoreError, match="not empty"):
        fetch_splits(store, uri, tmp_path / "fetched")


def test_altered_or_incomplete_folders_are_refused(tmp_path, store):
    folder, _ = write_splits(tmp_path / "local", TRAIN, VAL, **RECIPE)
    (folder / TRAIN_FILE).write_text((folder / TRAIN_FILE).read_text().replace("bug 1", "bug one"))
    with pytest.raises(SplitError, match="does not match the sha256"):
        read_splits(folder)
    (folder / MANIFEST_FILE).unlink()
    with pytest.raises(SplitError, match="has no manifest.json"):
        read_splits(folder)
    with pytest.raises(ObjectStoreError, match="has no manifest.json"):
        store.put_dir(folder, "x/y", MANIFEST_FILE)
    with pytest.raises(ObjectStoreError, match=r"key 'x/\.\./y'"):
        store.put_dir(folder, "x/../y", MANIFEST_FILE)
    with pytest.raises(SplitError, match="in both train and val"):
        write_splits(tmp_path / "overlap", TRAIN, TRAIN[:1], **RECIPE)
