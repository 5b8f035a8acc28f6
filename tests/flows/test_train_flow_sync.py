"""The training flow end to end on the tiny model, sync schedule: one batch at a time, every call on the current
policy, the traced rollouts, the last update uploaded (the async schedule and resume are in test_train_flow.py).

The tasks ask for fewer than 9 words and the tiny model writes 12 random tokens (6-11 words, median 9): some answers
pass, some fail, so groups have reward variance and the loop really updates the policy.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.flows.train_support import mlflow_run, overrides
from tests.tracking.trace_checks import check_run_traces, gateway_records

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def test_train_if_sync_schedule_runs_one_batch_at_a_time(prefect_api, tiny_model_dir, tmp_path, monkeypatch):
    """Three sync iterations, the last forced to have no gradient signal, checkpoints every 5 updates: exactly one
    batch of groups per iteration, every call on the current policy (lag 0), and the last update is still uploaded
    (with the loop's data position) although no upload was due when it ran."""
    import flows.named_flows
    import flows.train
    from trainer.loop_state import read_loop_state
    from trainer.prepared_step import PreparedStep

    real_build_batch, calls = flows.train.build_batch, []

    def third_without_signal(*args, **kwargs):
        prepared, split = real_build_batch(*args, **kwargs)
        calls.append(prepared.no_signal)
        return (PreparedStep(None, prepared.metrics) if len(calls) == 3 else prepared), split

    monkeypatch.setattr(flows.train, "build_batch", third_without_signal)
    summary = flows.named_flows.train_if("if-local", overrides(
        tmp_path, tiny_model_dir, name="tiny-if-sync",
        **{"rollout.schedule": "sync", "algorithm.iterations": 3, "algorithm.val_every": 3, "checkpoints.every": 5}))
    client, run = mlflow_run(tmp_path, summary["mlflow_run_id"])
    assert run.data.params["rollout.schedule"] == "sync"
    assert [m.value for m in client.get_metric_history(run.info.run_id, "staleness/lag_max")] == [0.0, 0.0, 0.0]
    assert client.get_metric_history(run.info.run_id, "rollout/rollouts")[-1].value == 8.0
    val_steps = [m.step for m in client.get_metric_history(run.info.run_id, "val/rollouts")]
    assert val_steps == [0, 3], "a baseline validation at step 0, then after the last iteration"
    gateway_db = tmp_path / "runs" / "tiny-if-sync" / "gateway.db"
    traces = check_run_traces(client, run.info.run_id, gateway_records(gateway_db))
    modes = sorted((t.info.tags["harnessrl.mode"], t.info.tags["harnessrl.iteration"]) for t in traces)
    assert modes == [("train", "1")] * 2 + [("train", "2")] * 2 + [("train", "3")] * 2 + [("val", "0")] * 2 + [
        ("val", "3")] * 2, "2 traced rollouts per iteration (tracking.traces.train_per_iteration) and every val one"

    assert summary["updates"] >= 1, "two iterations of 2 groups of 4 random answers (flat: 1 in 4,096)"
    uri = summary["checkpoint_uri"]
    assert uri is not None and uri.endswith(f"/step-{summary['updates']:06d}"), uri  # its policy version, not the
    # iteration: the third iteration did not step
    state = read_loop_state(Path(urlsplit(uri).path))
    assert state.iteration == 3 and state.next_task == 6 and state.open_tasks == [], state
