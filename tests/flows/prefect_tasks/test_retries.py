"""Tasks retry I/O failures only: a deterministic error fails at once, a transient one is tried again."""

from __future__ import annotations

import httpx
import pytest
from prefect.states import Failed

from flows.prefect_tasks import data, evaluation, rollouts, swe_data, training
from flows.prefect_tasks.retries import io_failure, is_transient
from gateway.client import GatewayAPIError
from rollouts.task_data import TaskDataError


@pytest.mark.parametrize(("error", "transient"), [
    (ConnectionError("refused"), True),
    (TimeoutError("slow"), True),
    (httpx.ConnectError("down"), True),
    (GatewayAPIError(503, "draining", None), True),
    (GatewayAPIError(409, "invalid transition", "conflict"), False),
    (TaskDataError("task file 'x.jsonl' does not exist"), False),
    (ValueError("bad value"), False),
])
def test_only_io_failures_are_transient(error, transient):
    assert is_transient(error) is transient
    assert io_failure(None, None, Failed(data=error)) is transient


def test_every_retrying_task_retries_only_io_failures():
    tasks = [data.load_dataset, data.load_versioned_splits, evaluation.latest_train_checkpoint,
             evaluation.download_checkpoint, evaluation.load_instances, rollouts.fill_in_flight, swe_data.load_swe_rows,
             swe_data.write_versioned_splits, training.publish_checkpoint, training.find_resume_point]
    assert all(task.retries and task.retry_condition_fn is io_failure for task in tasks), \
        [task.name for task in tasks if task.retry_condition_fn is not io_failure]
