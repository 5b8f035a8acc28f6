"""`prepare-swe-data` end to end on generated tasks with the tiny model (k=2): every step's exact counts, the probes
through the real loop, consistent difficulty counts, versioned splits that read back, MLflow and Prefect artifacts.

The tiny model cannot fix a bug, so the probes mostly give 0/k: the test checks that the counts add up, not a split.
Two generated instances (each SWE probe is a harness process and a graded test run: 2 x k of them, not 3 x k) and one
row of each bad kind: every cleaning step still keeps some rows and drops one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recipes.swe.generator import generate, load_instances, write_instances
from recipes.swe.splits import fetch_splits
from storage.directory_store import directory_store
from tests.recipes.swe.conftest import write_tiny_project

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
K = 2
GOOD = 2  # generated instances; every one that survives cleaning is probed K times


def store_with_bad_rows(tmp_path: Path) -> tuple[Path, list[str]]:
    """A store with GOOD generated instances and one of each bad kind: empty statement, missing base, 201 tests."""
    store = tmp_path / "store"
    good = generate(str(write_tiny_project(tmp_path / "src" / "tinymath")), store, count=GOOD, seed=0)
    assert len(good) == GOOD
    template = good[0]
    bad = [{**template, "instance_id": "bad-empty-statement", "problem_statement": "   "},
           {**template, "instance_id": "bad-no-base", "repo": "harnessrl/local__gone.00000000",
            "image_name": "local:repos/local__gone.00000000"},
           {**template, "instance_id": "bad-too-many-tests",
            "PASS_TO_PASS": [f"tests/test_x.py::test_{i}" for i in range(201 - len(template["FAIL_TO_PASS"]))]}]
    write_instances(store, bad)
    assert len(load_instances(store)) == GOOD + 3
    return store, [instance["instance_id"] for instance in good]


def read_prefect_artifact(key: str) -> str | None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    return str(found[-1].data) if found else None


def test_prepare_swe_data_on_generated_tasks(prefect_api, tiny_model_dir, tmp_path):
    from mlflow import MlflowClient

    from flows.swe_data import prepare_swe_data

    store, good_ids = store_with_bad_rows(tmp_path)
    overrides = {"name": "swe-data-test", "work_dir": str(tmp_path / "runs"), "engine.max_batch_size": 16,
                 "rollout.task_overrides": {"step_limit": 3, "max_tokens": 48, "command_timeout_s": 20},
                 "rollout.wait_timeout_s": 900, "controller.concurrency": 6, "controller.harness_timeout_s": 300,
                 "tracking.tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "tracking.experiment": "swe-data-test"}
    summary = prepare_swe_data(source="generated", kind="swe-smith", n_mixed=10, n_unsolved=10, n_heldout=1, k=K,
                               seed=5, model=str(tiny_model_dir), store=str(store),
                               splits_store=(tmp_path / "splits").as_uri(), overrides=overrides)

    counts = summary["counts"]
    assert counts["rows_loaded"] == GOOD + 3
    assert [counts[f"{step}/{key}"] for step in ("drop_empty_statements", "drop_missing_environment",
                                                 "drop_too_many_tests") for key in ("in", "kept", "dropped")] == \
        [GOOD + 3, GOOD + 2, 1, GOOD + 2, GOOD + 1, 1, GOOD + 1, GOOD, 1]
    assert counts["probe/rollouts"] + K * counts["probe/unfinished_tasks"] == GOOD * K
    probed = counts["difficulty/probed"]
    assert probed + counts["probe/unfinished_tasks"] == GOOD
    assert counts["difficulty/solved"] + counts["difficulty/mixed"] + counts["difficulty/unsolved"] == probed
    assert summary["n_train"] + summary["n_val"] + counts["difficulty/solved"] + counts["difficulty/unused"] == probed
    assert summary["n_val"] == min(1, probed - counts["difficulty/solved"])

    splits = fetch_splits(directory_store((tmp_path / "splits").as_uri()), summary["splits_uri"], tmp_path / "fetched")
    assert summary["splits_uri"].endswith(f"/swe-smith/{summary['version']}")
    assert (splits.manifest.k, splits.manifest.seed, splits.manifest.version) == (K, 5, summary["version"])
    assert splits.manifest.steps["drop_missing_environment"] == {"in": GOOD + 2, "kept": GOOD + 1, "dropped": 1}
    assert splits.manifest.steps["probe_difficulty"]["in"] == GOOD
    assert splits.manifest.params["probe_task_overrides"] == overrides["rollout.task_overrides"]  # what probed them
    ids = [row["instance_id"] for row in splits.train + splits.val]
    assert len(set(ids)) == len(ids) and set(ids) <= set(good_ids)
    assert all(row["source"] == "swe-smith" and row["fix_patch"] for row in splits.train + splits.val)

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.get_run(summary["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["splits_uri"] == summary["splits_uri"]
    assert run.data.metrics["drop_too_many_tests/dropped"] == 1.0
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "data")}
    assert {"data/validation.md", "data/validation.json", "data/manifest.json", "data/dropped.json",
            "data/probe_outcomes.json"} <= artifacts
    dropped_file = client.download_artifacts(run.info.run_id, "data/dropped.json", str(tmp_path))
    dropped = json.loads(Path(dropped_file).read_text())
    assert dropped["drop_missing_environment"][0][0] == "bad-no-base"
    assert "bad-empty-statement" in (read_prefect_artifact("swe-data-validation-swe-smith") or "")
    assert summary["version"] in (read_prefect_artifact("swe-data-summary") or "")
