"""train-calculator end to end on the tiny model: the anthropic SDK's tool runner as the harness in the local runner's
sandbox, through the gateway's Messages translation to the embedded engine, graded by the recipe, one sync iteration.

The tiny model is random: it never states an exact sum or product, so every reward is 0, the iteration has no gradient
signal and the flow says so; what is checked is the wiring (every rollout graded, none failed, the first turn's
forced tool_choice carried in each rollout's first Messages call, with the engine's forced opening recorded).
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from tests.flows.train_support import mlflow_run

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def test_train_calculator_runs_the_sdk_harness_in_the_sandbox(prefect_api, tiny_model_dir, tmp_path):
    from flows.named_flows import train_calculator

    summary = train_calculator("calculator-local", {
        "name": "tiny-calc", "work_dir": str(tmp_path / "runs"), "engine.model": str(tiny_model_dir),
        "engine.max_batch_size": 8, "data.train_tasks": 4, "data.val_tasks": 1, "rollout.group_size": 2,
        "rollout.batch_groups": 1, "rollout.schedule": "sync", "rollout.wait_timeout_s": 300,
        "rollout.task_overrides": {"max_tokens": 8, "max_turns": 2, "temperature": 1.0},
        "gateway.sampling": {"temperature": 1.0}, "controller.concurrency": 4, "algorithm.iterations": 1,
        "algorithm.val_every": 0, "algorithm.samples": {"max_response_tokens": 8},
        "tracking.tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "tracking.experiment": "flow-test",
        "checkpoints.store": f"file://{tmp_path / 'store'}"})
    assert summary["iterations"] == 1 and summary["no_signal_iterations"] == 1, summary
    client, run = mlflow_run(tmp_path, summary["mlflow_run_id"])
    assert run.data.tags["recipe"] == "calculator"
    assert client.get_metric_history(run.info.run_id, "rollout/rollouts")[-1].value == 2.0
    with sqlite3.connect(tmp_path / "runs" / "tiny-calc" / "gateway.db") as db:
        rollouts = db.execute("SELECT id, mode, state, reward FROM rollouts").fetchall()
        firsts = db.execute("SELECT kind, request, sampling FROM calls WHERE seq = 0").fetchall()
    assert sorted(mode for _, mode, _, _ in rollouts) == ["train", "train", "val"], rollouts  # val at the end
    assert all(state == "succeeded" and reward == 0.0 for _, _, state, reward in rollouts), rollouts
    assert len(firsts) == len(rollouts) and all(kind == "messages" for kind, _, _ in firsts)
    assert all(json.loads(request)["tool_choice"] == {"type": "tool", "name": "calculator"} for _, request, _ in firsts)
    # the engine forced the call's opening in the prompt and said so: the call is trained, not masked as a grammar's
    recorded = [json.loads(sampling) for _, _, sampling in firsts]
    assert all(r["requested"]["tool_choice"] and r["forced_prompt_tokens"] > 0 for r in recorded), recorded
