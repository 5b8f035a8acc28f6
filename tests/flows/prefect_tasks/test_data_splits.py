"""A versioned SWE split as training tasks: `load_versioned_splits` gives, through the recipe's `versioned_splits`
hook, rollout inputs that hide the fix and the tests; a recipe without the hook is refused."""

from __future__ import annotations

import pytest

from flows.config import load_run_config
from flows.prefect_tasks.data import load_versioned_splits
from flows.setup import splits_store
from recipes.swe.splits import publish_splits, split_store_root, write_splits


def instance(i: int) -> dict:
    return {"instance_id": f"repo.bug__{i}", "source": "swe-smith", "repo": "harnessrl/repo", "base_commit": "abc",
            "problem_statement": f"bug {i}", "FAIL_TO_PASS": ["t::a"], "PASS_TO_PASS": ["t::b"], "image_name": None,
            "bug_patch": "BUG", "fix_patch": "FIX", "test_patch": None, "created_at": None, "version": None,
            "environment_setup_commit": None}


def test_split_rows_become_swe_rollout_inputs_without_fix_or_tests(tmp_path, monkeypatch):
    folder, manifest = write_splits(tmp_path / "out", [instance(0), instance(1)], [instance(2)], name="swe-smith",
                                    seed=3, k=4, sizes={"n_mixed": 2, "n_unsolved": 0, "n_heldout": 1},
                                    sources=["generated"], steps={}, difficulty={})
    config = load_run_config("swe-local", {"checkpoints.store": f"file://{tmp_path / 'ckpt'}"})
    root = f"file://{tmp_path / 'splits'}"
    uri = publish_splits(folder, splits_store(config, root))
    assert uri.endswith(f"swe-smith/{manifest.version}")
    assert split_store_root(uri) == root
    monkeypatch.setenv("HARNESSRL_SWE_STORE", "/swe-store")
    train, val = load_versioned_splits.fn(f"splits:{uri}", "swe", tmp_path / "fetched",  # as the train flow calls it
                                          lambda at: splits_store(config, at))
    assert [t["id"] for t in train] == ["repo.bug__0", "repo.bug__1"] and [t["id"] for t in val] == ["repo.bug__2"]
    assert train[0] == {"id": "repo.bug__0", "problem_statement": "bug 0", "store": "/swe-store", "level": 3,
                        "family": "repo.bug__0", "recipe": "swe"}


def test_a_recipe_without_versioned_splits_is_refused_naming_the_fix(tmp_path):
    with pytest.raises(ValueError, match="recipe 'search' cannot read .* use a task file or 'generated'"):
        load_versioned_splits.fn("splits:file:///nowhere/swe-smith/1", "search", tmp_path, lambda root: None)
