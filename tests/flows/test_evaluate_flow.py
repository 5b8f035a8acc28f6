"""The evaluation flow end to end on generated tasks with the tiny model: a checkpoint found as the latest train-swe
checkpoint in MLflow, downloaded from the checkpoint store, served by the embedded engine, one val-mode rollout per
instance, predictions JSONL and report on disk and in MLflow; the gold patches graded through the same path resolve.
Also: SWE-bench Verified rows are reported as not runnable here (without fetching the weights nothing would serve),
and a nightly run without a checkpoint ends plainly.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from recipes.swe.evaluation import grade_predictions
from recipes.swe.evaluation_report import OutcomeStatus, build_report
from recipes.swe.generator import generate
from recipes.swe.predictions import Prediction, read_predictions
from tests.recipes.swe.conftest import write_tiny_project
from tests.tracking.trace_checks import check_run_traces, feedback_value, gateway_records

pytestmark = pytest.mark.slow
SWE_SMALL = {"step_limit": 3, "max_tokens": 48, "command_timeout_s": 20}
INSTANCES = 2


@pytest.fixture
def empty_store(tmp_path, monkeypatch) -> Path:
    """An empty SWE store set as the recipe's store (so no instance of the user's store is found)."""
    monkeypatch.setenv("HARNESSRL_SWE_STORE", str(tmp_path / "empty-store"))
    return tmp_path / "empty-store"


@pytest.fixture
def swe_store(tmp_path, monkeypatch) -> tuple[Path, list[dict]]:
    """A store of generated instances from the tiny project, set as the SWE recipe's store."""
    store = tmp_path / "swe-store"
    monkeypatch.setenv("HARNESSRL_SWE_STORE", str(store))
    return store, generate(str(write_tiny_project(tmp_path / "src" / "tinymath")), store, count=INSTANCES, seed=0)


def overrides(tmp_path: Path, tiny_model_dir: Path) -> dict:
    return {"work_dir": str(tmp_path / "runs"), "engine.model": str(tiny_model_dir), "engine.max_batch_size": 8,
            "controller.concurrency": 2, "controller.harness_timeout_s": 300,
            "rollout.task_overrides": SWE_SMALL, "rollout.wait_timeout_s": 600,
            "tracking.tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
            "checkpoints.store": f"file://{tmp_path / 'store'}"}


def train_checkpoint(tmp_path: Path, tiny_model_dir: Path) -> str:
    """The tiny model uploaded as a train-swe checkpoint, tagged on a train-swe-like MLflow run (as train.py does)."""
    from mlflow import MlflowClient

    from storage.checkpoint_store import CheckpointStore
    from storage.local_store import LocalStore
    from trainer.checkpoints import META_FILE, meta_now

    local = tmp_path / "trained" / "step-000003"
    shutil.copytree(tiny_model_dir, local)
    (local / META_FILE).write_text(meta_now(3, 3, 3, tiny_model_dir).model_dump_json())
    uri = CheckpointStore(LocalStore(tmp_path / "store")).upload(local, "swe-tiny", 3)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("harnessrl")
    older = client.create_run(experiment, tags={"recipe": "swe", "checkpoint_uri": "file:///gone/old/step-000001"})
    client.set_terminated(older.info.run_id)
    client.create_run(experiment, tags={"recipe": "instruction_following", "checkpoint_uri": "file:///if/step-1"})
    client.create_run(experiment, tags={"recipe": "swe", "checkpoint_uri": uri}, run_name="swe-tiny")
    return uri


@pytest.mark.e2e
def test_nightly_evaluates_the_latest_train_swe_checkpoint_and_gold_resolves(prefect_api, tiny_model_dir, tmp_path,
                                                                              swe_store):
    from mlflow import MlflowClient

    from flows.evaluate import evaluate_swe_verified

    store, instances = swe_store
    uri = train_checkpoint(tmp_path, tiny_model_dir)
    summary = evaluate_swe_verified(latest_checkpoint=True, source="generated",
                                    overrides=overrides(tmp_path, tiny_model_dir))
    report = summary["report"]
    assert report["checkpoint_uri"] == uri and report["model"] == "harnessrl/swe-tiny/step-000003"
    assert (report["total"], report["submitted"], report["not_runnable"]) == (INSTANCES, INSTANCES, 0), report
    statuses = sum(report[key] for key in ("resolved", "unresolved", "empty_patches", "errors", "infra_failures"))
    assert statuses == INSTANCES and report["infra_failures"] == 0, report

    predictions = read_predictions(Path(summary["predictions"]))
    assert [p.instance_id for p in predictions] == [i["instance_id"] for i in instances], "in the instances' order"
    assert {p.model_name_or_path for p in predictions} == {"harnessrl/swe-tiny/step-000003"}
    assert json.loads(Path(summary["report_json"]).read_text())["total"] == INSTANCES
    assert "SWE-bench evaluation of `harnessrl/swe-tiny/step-000003`" in Path(summary["report_markdown"]).read_text()

    # the flow's predictions, graded again through grade_patch, land where the rollouts' grades put them
    flow_status = {i: OutcomeStatus.RESOLVED for i in report["resolved_ids"]}
    flow_status |= {i: OutcomeStatus.UNRESOLVED for i in report["unresolved_ids"]}
    flow_status |= {i: OutcomeStatus.EMPTY_PATCH for i in report["empty_patch_ids"]}
    regraded = {o.instance_id: o.status for o in grade_predictions(store, predictions)}
    assert all(regraded[i] == status for i, status in flow_status.items()), (regraded, flow_status)

    # the gold patches (the reverse of each bug), graded through the same path, resolve
    from recipes.swe.datasets import load_swe_dataset

    rows = load_swe_dataset("generated", "swe-smith", cache_dir=tmp_path / "cache", store=store)
    gold = [Prediction(instance_id=r["instance_id"], model_name_or_path="gold", model_patch=r["fix_patch"])
            for r in rows]
    assert build_report(grade_predictions(store, gold), model="gold", source="generated").resolved_rate == 1.0

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.get_run(summary["mlflow_run_id"])
    assert run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == "swe-bench-verified"
    assert run.data.tags["model"] == "harnessrl/swe-tiny/step-000003" and run.data.tags["checkpoint_uri"] == uri
    assert run.data.metrics["resolved_rate"] == report["resolved_rate"] and run.data.metrics["total"] == INSTANCES
    assert {"predictions.jsonl", "report.json", "report.md"} <= {a.path for a in client.list_artifacts(run.info.run_id)}

    # each instance's rollout is a trace of the run, its calls as spans, the resolution as feedback
    gateway_db = tmp_path / "runs" / summary["run_name"] / "gateway.db"
    traces = check_run_traces(client, run.info.run_id, gateway_records(gateway_db))
    resolved = {t.info.tags["harnessrl.instance_id"]: feedback_value(t, "resolved") for t in traces}
    assert resolved == {i["instance_id"]: i["instance_id"] in report["resolved_ids"] for i in instances}


def verified_file(path: Path) -> Path:
    """Two rows in SWE-bench Verified's columns (FAIL_TO_PASS / PASS_TO_PASS as JSON text)."""
    rows = [{"repo": "astropy/astropy", "instance_id": f"astropy__astropy-1290{i}", "base_commit": "d16bfe05" * 5,
             "patch": "diff --git a/a.py b/a.py\n", "test_patch": "diff --git a/t.py b/t.py\n",
             "problem_statement": "broken", "hints_text": "", "created_at": "2022-03-03T15:14:54Z", "version": "4.3",
             "FAIL_TO_PASS": json.dumps(["t.py::a"]), "PASS_TO_PASS": json.dumps([]),
             "environment_setup_commit": "298ccb47" * 5, "difficulty": "15 min - 1 hour"} for i in range(2)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_swe_bench_instances_are_reported_as_not_runnable_here(prefect_api, tiny_model_dir, tmp_path, empty_store):
    from flows.evaluate import evaluate_swe_verified

    summary = evaluate_swe_verified(model=str(tiny_model_dir), source=str(verified_file(tmp_path / "verified.jsonl")),
                                    overrides=overrides(tmp_path, tiny_model_dir))
    report = summary["report"]
    assert (report["total"], report["submitted"], report["not_runnable"], report["resolved_rate"]) == (2, 0, 2, 0.0)
    reason = report["not_runnable_reasons"]["astropy__astropy-12900"]
    assert "swebench/sweb.eval.x86_64.astropy_1776_astropy-12900:latest" in reason and "no cluster" in reason
    assert Path(summary["predictions"]).read_text() == "", "instances not run have no prediction"
    assert report["checkpoint_uri"] is None and report["model"] == str(tiny_model_dir)


def test_nothing_runnable_fetches_no_weights(prefect_api, tiny_model_dir, tmp_path, empty_store, monkeypatch):
    import flows.evaluate

    def no_download(*args, **kwargs):
        raise AssertionError("the weights were resolved though no instance runs here")

    monkeypatch.setattr(flows.evaluate, "resolve_weights", no_download)
    uri = "file:///nowhere/swe-gone/step-000004"
    summary = flows.evaluate.evaluate_swe_verified(checkpoint_uri=uri,
                                                   source=str(verified_file(tmp_path / "verified.jsonl")),
                                                   overrides=overrides(tmp_path, tiny_model_dir))
    report = summary["report"]
    assert (report["total"], report["not_runnable"], report["checkpoint_uri"]) == (2, 2, uri)
    assert report["model"] == "harnessrl/swe-gone/step-000004"
    from mlflow import MlflowClient

    tags = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(summary["mlflow_run_id"]).data.tags
    assert (tags["model"], tags["checkpoint_uri"]) == ("harnessrl/swe-gone/step-000004", uri)


def test_nightly_without_a_train_checkpoint_ends_plainly(prefect_api, tiny_model_dir, tmp_path):
    from flows.evaluate import evaluate_swe_verified

    summary = evaluate_swe_verified(latest_checkpoint=True, overrides=overrides(tmp_path, tiny_model_dir))
    assert summary["mlflow_run_id"] is None and "no train-swe run with a checkpoint_uri tag" in summary["skipped"]


def test_exactly_one_target_is_required(prefect_api, tiny_model_dir, tmp_path):
    from flows.evaluate import evaluate_swe_verified

    with pytest.raises(ValueError, match="exactly one of checkpoint_uri"):
        evaluate_swe_verified(overrides=overrides(tmp_path, tiny_model_dir))
    with pytest.raises(ValueError, match=r"got \['checkpoint_uri', 'model'\]"):
        evaluate_swe_verified(checkpoint_uri="file:///x/r/step-000001", model="tiny",
                              overrides=overrides(tmp_path, tiny_model_dir))
