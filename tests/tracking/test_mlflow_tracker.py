"""MlflowTracker against a real `mlflow server`: everything logged reads back through a fresh MlflowClient."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import mlflow
import pytest

from tests.services import MlflowServerProcess
from tracking.mlflow_tracker import MlflowTracker, find_run_id
from tracking.tracker import MAX_TAG_VALUE_CHARS, TRUNCATION_MARKER, Tracker

pytestmark = pytest.mark.slow

CONFIG = {"recipe": "swe", "algorithm": {"estimator": "grpo", "lr": 1e-6, "groups": [4, 8]},
          "work_dir": Path("/runs/a")}


def experiment_name() -> str:
    return f"exp-{uuid.uuid4().hex[:8]}"


def history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def test_params_metrics_tags_and_artifacts_read_back(mlflow_server: MlflowServerProcess, tmp_path: Path) -> None:
    experiment = experiment_name()
    tracker = MlflowTracker(mlflow_server.url, experiment, "run-a", {"recipe": "swe"})
    assert isinstance(tracker, Tracker)
    tracker.log_params(CONFIG)
    for step in range(3):
        tracker.log_metrics({"loss": 1.0 / (step + 1), "reward/mean": 0.1 * step}, step=step)
    tracker.log_text("# Trajectories\n\nhello", "trajectories/train/step-000002.md")
    tracker.log_dict([{"rollout_id": "r1", "reward": 1.0}], "trajectories/train/step-000002.json")
    tracker.set_tags({"policy_version": "2", "note": "x" * (MAX_TAG_VALUE_CHARS + 10)})
    tracker.end()

    client = mlflow.MlflowClient(mlflow_server.url)
    run = client.get_run(tracker.run_id)
    assert run.info.run_name == "run-a" and run.info.status == "FINISHED"
    assert run.info.experiment_id == client.get_experiment_by_name(experiment).experiment_id
    assert run.data.params == {"recipe": "swe", "algorithm.estimator": "grpo", "algorithm.lr": "1e-06",
                               "algorithm.groups": "[4, 8]", "work_dir": "/runs/a"}
    assert history(client, tracker.run_id, "loss") == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3))]
    assert history(client, tracker.run_id, "reward/mean") == [(0, 0.0), (1, 0.1), (2, pytest.approx(0.2))]
    assert run.data.tags["recipe"] == "swe" and run.data.tags["policy_version"] == "2"
    assert len(run.data.tags["note"]) == MAX_TAG_VALUE_CHARS and run.data.tags["note"].endswith(TRUNCATION_MARKER)

    assert run.info.artifact_uri.startswith("mlflow-artifacts:")
    listed = [info.path for info in client.list_artifacts(tracker.run_id, "trajectories/train")]
    assert listed == ["trajectories/train/step-000002.json", "trajectories/train/step-000002.md"]
    local = Path(client.download_artifacts(tracker.run_id, "trajectories", str(tmp_path)))
    assert (local / "train" / "step-000002.md").read_text() == "# Trajectories\n\nhello"
    assert json.loads((local / "train" / "step-000002.json").read_text()) == [{"rollout_id": "r1", "reward": 1.0}]
    stored = list((mlflow_server.root / "artifacts").rglob("step-000002.md"))
    assert len(stored) == 1 and tracker.run_id in str(stored[0])


def test_resume_by_id_appends_metrics_to_the_same_run(mlflow_server: MlflowServerProcess) -> None:
    experiment = experiment_name()
    first = MlflowTracker(mlflow_server.url, experiment, "resumable", {"attempt": "1"})
    first.log_params(CONFIG)
    first.log_metrics({"loss": 3.0}, step=0)
    first.log_metrics({"loss": 2.0}, step=1)
    # the process dies here: the run is left RUNNING without end()
    run_id = find_run_id(mlflow_server.url, experiment, "resumable")
    assert run_id == first.run_id

    second = MlflowTracker(mlflow_server.url, experiment, "resumable", {"attempt": "2"}, run_id=run_id)
    assert second.run_id == first.run_id and second.resumed
    second.log_params(CONFIG)  # the same config again is accepted
    second.log_metrics({"loss": 1.0}, step=2)
    second.end("FAILED")
    third = MlflowTracker(mlflow_server.url, experiment, "resumable", {}, run_id=run_id)
    client = mlflow.MlflowClient(mlflow_server.url)
    assert client.get_run(run_id).info.status == "RUNNING"  # re-opened after the FAILED end
    third.log_metrics({"loss": 0.5}, step=3)
    third.end()

    assert history(client, run_id, "loss") == [(0, 3.0), (1, 2.0), (2, 1.0), (3, 0.5)]
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["attempt"] == "2"
    experiment_id = client.get_experiment_by_name(experiment).experiment_id
    assert [r.info.run_id for r in client.search_runs([experiment_id])] == [run_id]
    with pytest.raises(mlflow.exceptions.MlflowException, match="Changing param values is not allowed"):
        third.log_params({"recipe": "search"})


def test_two_runs_in_one_process_stay_apart_and_compare_side_by_side(mlflow_server: MlflowServerProcess) -> None:
    experiment = experiment_name()
    grpo = MlflowTracker(mlflow_server.url, experiment, "grpo", {"recipe": "swe"})
    rloo = MlflowTracker(mlflow_server.url, experiment, "rloo", {"recipe": "swe"})
    grpo.log_params({"algorithm": {"estimator": "grpo", "lr": 1e-6}})
    rloo.log_params({"algorithm": {"estimator": "rloo", "lr": 2e-6}})
    for step in range(2):  # interleaved writes
        grpo.log_metrics({"reward/mean": 0.2 + step}, step)
        rloo.log_metrics({"reward/mean": 0.4 + step, "rloo_only": 1.0}, step)
    grpo.end()
    rloo.end()

    client = mlflow.MlflowClient(mlflow_server.url)
    experiment_id = client.get_experiment_by_name(experiment).experiment_id
    runs = client.search_runs([experiment_id], order_by=["params.`algorithm.estimator` ASC"])
    assert [(r.info.run_name, r.data.params["algorithm.estimator"], r.data.params["algorithm.lr"],
             r.data.metrics["reward/mean"]) for r in runs] == [("grpo", "grpo", "1e-06", 1.2),
                                                               ("rloo", "rloo", "2e-06", 1.4)]
    assert "rloo_only" not in runs[0].data.metrics
    assert history(client, grpo.run_id, "reward/mean") == [(0, 0.2), (1, 1.2)]
    filtered = client.search_runs([experiment_id], filter_string="params.`algorithm.estimator` = 'rloo'")
    assert [r.info.run_id for r in filtered] == [rloo.run_id]


def test_a_wide_metric_batch_is_chunked(mlflow_server: MlflowServerProcess) -> None:
    tracker = MlflowTracker(mlflow_server.url, experiment_name(), "wide", {})
    tracker.log_metrics({f"m{i}": float(i) for i in range(1500)}, step=0)
    tracker.log_params({f"p{i}": i for i in range(250)})
    run = mlflow.MlflowClient(mlflow_server.url).get_run(tracker.run_id)
    assert len(run.data.metrics) == 1500 and run.data.metrics["m1499"] == 1499.0
    assert len(run.data.params) == 250


def test_resume_refuses_unknown_runs_and_runs_of_other_experiments(mlflow_server: MlflowServerProcess) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        MlflowTracker(mlflow_server.url, experiment_name(), "x", {}, run_id="0" * 32)
    other = MlflowTracker(mlflow_server.url, experiment_name(), "elsewhere", {})
    with pytest.raises(ValueError, match="belongs to experiment"):
        MlflowTracker(mlflow_server.url, experiment_name(), "x", {}, run_id=other.run_id)
    assert find_run_id(mlflow_server.url, "no-such-experiment", "x") is None


def test_context_manager_ends_failed_on_error(mlflow_server: MlflowServerProcess) -> None:
    with pytest.raises(RuntimeError), MlflowTracker(mlflow_server.url, experiment_name(), "boom", {}) as tracker:
        raise RuntimeError("training crashed")
    assert mlflow.MlflowClient(mlflow_server.url).get_run(tracker.run_id).info.status == "FAILED"
