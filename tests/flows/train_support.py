"""Shared pieces of the training-flow tests: a short instruction-following task file and the tiny-model overrides.

The tasks ask for fewer than 9 words and the tiny model writes 12 random tokens (6-11 words, median 9): some answers
pass, some fail, so groups have reward variance and the loop really updates the policy.
"""

from __future__ import annotations

import json
from pathlib import Path


def write_tasks(path: Path, count: int) -> Path:
    rows = [{"id": f"short-{i}", "topic": "anything", "request": "Say something.",
             "prompt": f"Say something short (task {i}). Answer with less than 9 words.",
             "instructions": [{"kind": "length_constraints:number_words",
                               "params": {"relation": "less than", "num_words": 9}}]} for i in range(count)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def overrides(tmp_path: Path, tiny_model_dir: Path, **extra) -> dict:
    return {
        "name": "tiny-if", "work_dir": str(tmp_path / "runs"),
        "engine.model": str(tiny_model_dir), "engine.max_batch_size": 16,
        "data.source": str(write_tasks(tmp_path / "tasks.jsonl", 16)), "data.train_tasks": 12, "data.val_tasks": 2,
        "rollout.group_size": 4, "rollout.batch_groups": 2, "rollout.max_inflight_groups": 3,
        "rollout.task_overrides": {"max_tokens": 12, "temperature": 1.0}, "rollout.wait_timeout_s": 300,
        "controller.concurrency": 6, "backend.optimizer.lr": 1e-3, "backend.schedule.max_tokens_per_micro_batch": 1024,
        "algorithm.iterations": 2, "algorithm.val_every": 0,
        "tracking.tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "tracking.experiment": "flow-test",
        "checkpoints.store": f"file://{tmp_path / 'store'}", "checkpoints.keep_local": 1,
        **extra,
    }


def mlflow_run(tmp_path: Path, run_id: str):
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    return client, client.get_run(run_id)
