"""tracking/mlflow_tracker.py and flows/prefect_tasks/tracking.py: the UI command, artifact locations, and the
Prefect task passing a tracker inside a flow."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.prefect_tasks.tracking import log_trajectories
from tests.services import MlflowServerProcess
from tests.tracking.support import USER
from tests.trainer.loop_support import call, rollout
from tracking.mlflow_tracker import MlflowTracker, default_artifact_location, ui_command
from tracking.trajectories import trajectory_artifact_file


def test_ui_command() -> None:
    assert ui_command("http://mlflow.internal:5000") == "http://mlflow.internal:5000"
    assert ui_command("https://mlflow.example.org") == "https://mlflow.example.org"
    assert ui_command("sqlite:////srv/mlruns/mlflow.db") == "mlflow ui --backend-store-uri sqlite:////srv/mlruns/mlflow.db"
    relative = ui_command("sqlite:///mlruns/mlflow.db")
    assert relative == f"mlflow ui --backend-store-uri sqlite:///{Path.cwd() / 'mlruns' / 'mlflow.db'}"
    assert ui_command("sqlite:////tmp/my runs/m.db") == "mlflow ui --backend-store-uri 'sqlite:////tmp/my runs/m.db'"
    assert ui_command("postgresql://u@db/mlflow") == "mlflow ui --backend-store-uri postgresql://u@db/mlflow"


def test_artifact_locations() -> None:
    assert default_artifact_location("sqlite:////srv/mlruns/mlflow.db") == "file:///srv/mlruns/artifacts"
    assert default_artifact_location("http://127.0.0.1:5000") is None
    assert trajectory_artifact_file(12) == "trajectories/train/step-000012.md"
    assert trajectory_artifact_file(3, "val", "json") == "trajectories/val/step-000003.json"


@pytest.mark.slow
def test_sqlite_store_keeps_artifacts_beside_the_database(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'db' / 'mlflow.db'}"
    (tmp_path / "db").mkdir()
    with MlflowTracker(uri, "local", "r", {}) as tracker:
        tracker.log_text("hi", "notes/a.txt")
    assert (tmp_path / "db" / "artifacts" / tracker.run_id / "artifacts" / "notes" / "a.txt").read_text() == "hi"


@pytest.mark.slow
def test_log_trajectories_task_takes_the_tracker_inside_a_flow(mlflow_server: MlflowServerProcess,
                                                                prefect_api: None) -> None:
    from mlflow import MlflowClient
    from prefect import flow

    items = [(rollout("r1", reward=1.0), [call("r1", messages=[USER], response_text="fixed")])]

    @flow
    def tracked(tracking_uri: str) -> tuple[str, list[str]]:
        with MlflowTracker(tracking_uri, "prefect-tasks", "flow-run", {"recipe": "swe"}) as tracker:
            tracker.log_params({"a": {"b": 1}})
            for step in range(2):
                tracker.log_metrics({"loss": 1.0 - step}, step)
            paths = log_trajectories(tracker, items, step=1)
        return tracker.run_id, paths

    run_id, paths = tracked(mlflow_server.url)
    client = MlflowClient(mlflow_server.url)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.params == {"a.b": "1"}
    assert sorted((m.step, m.value) for m in client.get_metric_history(run_id, "loss")) == [(0, 1.0), (1, 0.0)]
    assert paths == ["trajectories/train/step-000001.md", "trajectories/train/step-000001.json"]
    listed = sorted(info.path for info in client.list_artifacts(run_id, "trajectories/train"))
    assert listed == sorted(paths)
