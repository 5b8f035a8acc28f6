"""MLflow behind the `Tracker` seam.

`MlflowTracker` talks to one run through an explicit `mlflow.MlflowClient`: no global active run, so several trackers
in one process stay apart. Trackers hold a client and are not serialisable: the Prefect tasks that take one never
cache or persist results (`NO_CACHE`, `persist_result=False`), so a tracker passes from task to task inside one flow
run only.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import LifecycleStage, Metric, Param, RunStatus, RunTag
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import RESOURCE_ALREADY_EXISTS, RESOURCE_DOES_NOT_EXIST, ErrorCode

from tracking.mlflow_traces import write_traces
from tracking.traces import TraceDraft
from tracking.tracker import (
    MAX_TAG_VALUE_CHARS,
    check_artifact_file,
    check_status,
    flatten_params,
    metric_value,
    truncate_value,
)


def sqlite_path(tracking_uri: str) -> Path | None:
    """The database file of a `sqlite:///` tracking URI (absolute), else None."""
    prefix = "sqlite:///"
    if not tracking_uri.startswith(prefix):
        return None
    return Path(tracking_uri[len(prefix):]).resolve()


def default_artifact_location(tracking_uri: str) -> str | None:
    """Where a new experiment keeps artifacts: `artifacts/` beside a sqlite database; None (the server's) otherwise."""
    db = sqlite_path(tracking_uri)
    return (db.parent / "artifacts").as_uri() if db is not None else None


def _has_code(error: MlflowException, code: int) -> bool:
    return error.error_code == ErrorCode.Name(code)


def ensure_experiment(client: MlflowClient, name: str, artifact_location: str | None = None) -> str:
    """The id of experiment `name`, created when missing (a concurrent creation is fine)."""
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:
            return client.create_experiment(name, artifact_location=artifact_location)
        except MlflowException as error:
            if not _has_code(error, RESOURCE_ALREADY_EXISTS):
                raise
            experiment = client.get_experiment_by_name(name)
    if experiment.lifecycle_stage == LifecycleStage.DELETED:
        raise ValueError(f"MLflow experiment {name!r} (id {experiment.experiment_id}) is deleted; restore it "
                         f"(`mlflow experiments restore --experiment-id {experiment.experiment_id}`) or pick "
                         "another experiment name")
    return experiment.experiment_id


class MlflowTracker:
    """A `tracking.tracker.Tracker` writing to one MLflow run; `run_id=None` starts a run, a run id resumes it."""

    def __init__(self, tracking_uri: str, experiment: str, run_name: str | None = None,
                 tags: Mapping[str, str] | None = None, run_id: str | None = None,
                 artifact_location: str | None = None) -> None:
        self.tracking_uri = tracking_uri
        self.client = MlflowClient(tracking_uri=tracking_uri)
        self.experiment_id = ensure_experiment(
            self.client, experiment, artifact_location or default_artifact_location(tracking_uri))
        self.resumed = run_id is not None
        tag_values = {key: truncate_value(str(value), MAX_TAG_VALUE_CHARS) for key, value in (tags or {}).items()}
        if run_id is None:
            run = self.client.create_run(self.experiment_id, tags=tag_values, run_name=run_name)
            self._run_id = run.info.run_id
        else:
            self._run_id = self._reopen(run_id, experiment)
            self.set_tags(tag_values)

    def _reopen(self, run_id: str, experiment: str) -> str:
        try:
            run = self.client.get_run(run_id)
        except MlflowException as error:
            if not _has_code(error, RESOURCE_DOES_NOT_EXIST):
                raise
            raise ValueError(f"MLflow run {run_id!r} does not exist at {self.tracking_uri}; pass run_id=None to "
                             "start a new run") from error
        if run.info.experiment_id != self.experiment_id:
            raise ValueError(f"MLflow run {run_id!r} belongs to experiment id {run.info.experiment_id}, not "
                             f"{experiment!r} (id {self.experiment_id}); resume it in its own experiment")
        if run.info.lifecycle_stage == LifecycleStage.DELETED:
            raise ValueError(f"MLflow run {run_id!r} is deleted; restore it (`mlflow runs restore --run-id "
                             f"{run_id}`) or start a new run")
        self.client.update_run(run_id, status=RunStatus.to_string(RunStatus.RUNNING))
        return run_id

    @property
    def run_id(self) -> str:
        return self._run_id

    def log_params(self, params: Mapping[str, Any]) -> None:
        flat = flatten_params(params)
        self.client.log_batch(self._run_id, params=[Param(key, value) for key, value in flat.items()])

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        now_ms = int(time.time() * 1000)
        batch = [Metric(key, metric_value(key, value), now_ms, int(step)) for key, value in metrics.items()]
        if batch:
            self.client.log_batch(self._run_id, metrics=batch)

    def log_text(self, text: str, artifact_file: str) -> None:
        self.client.log_text(self._run_id, text, check_artifact_file(artifact_file))

    def log_dict(self, obj: Any, artifact_file: str) -> None:
        self.client.log_dict(self._run_id, obj, check_artifact_file(artifact_file))

    def set_tags(self, tags: Mapping[str, str]) -> None:
        batch = [RunTag(key, truncate_value(str(value), MAX_TAG_VALUE_CHARS)) for key, value in tags.items()]
        if batch:
            self.client.log_batch(self._run_id, tags=batch)

    def log_traces(self, drafts: Sequence[TraceDraft]) -> list[str]:
        return write_traces(self.tracking_uri, self.experiment_id, drafts)

    def end(self, status: str = "FINISHED") -> None:
        self.client.set_terminated(self._run_id, status=check_status(status))

    def __enter__(self) -> MlflowTracker:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self.end("FINISHED" if exc_type is None else "KILLED" if exc_type is KeyboardInterrupt else "FAILED")


def find_run_id(tracking_uri: str, experiment: str, run_name: str) -> str | None:
    """The newest live run named `run_name` in `experiment` (to resume by name), or None."""
    client = MlflowClient(tracking_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    quoted = run_name.replace("'", "\\'")
    runs = client.search_runs([found.experiment_id], filter_string=f"attributes.run_name = '{quoted}'",
                              max_results=1, order_by=["attributes.start_time DESC"])
    return runs[0].info.run_id if runs else None


def ui_command(tracking_uri: str) -> str:
    """How to look at the runs: the URL of an http(s) server, else an `mlflow ui` command for the store."""
    if tracking_uri.startswith(("http://", "https://")):
        return tracking_uri
    db = sqlite_path(tracking_uri)
    store = f"sqlite:///{db}" if db is not None else tracking_uri
    return f"mlflow ui --backend-store-uri {shlex.quote(store)}"
