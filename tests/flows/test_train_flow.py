"""The training flow end to end on the tiny model, async schedule: services, rollouts, updates, checkpoints to S3,
MLflow, resume (the sync schedule is in test_train_flow_sync.py: a file per worker, so the two runs go side by side).

The tasks ask for fewer than 9 words and the tiny model writes 12 random tokens (6-11 words, median 9): some answers
pass, some fail, so groups have reward variance and the loop really updates the policy.
"""

from __future__ import annotations

import pytest

from tests.flows.train_support import mlflow_run, overrides

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
ISSUE_METRICS = {
    "rollout/reward_mean", "rollout/reward_std", "rollout/pass_rate", "val/reward_mean", "val/reward_std",
    "val/pass_rate", "samples/samples_per_rollout_mean", "samples/single_sample_rollout_share",
    "samples/merge_failures_template", "samples/merge_failures_retokenization", "samples/merge_failures_other",
    "samples/trainable_tokens", "loss/total", "loss/clip_fraction", "loss/approx_kl_k3", "loss/entropy",
    "train/grad_norm", "train/lr", "train/policy_version", "staleness/lag_max", "staleness/lag_mean",
    "staleness/dropped_rollouts", "time/rollout_s", "time/drain_s", "time/update_s", "time/weight_sync_s",
    "throughput/response_tokens_per_s", "train/tokens_per_s",
    "off_policy/lag0_abs_diff_mean", "off_policy/lag0_abs_diff_max", "off_policy/lag0_k3",
    "off_policy/lag0_ratio_mean", "off_policy/measured_token_fraction",
    "rollout/infra_retry_rate", "rollout/infra_failed", "rollout/infra/engine_unreachable",
    "rollout/infra/lease_expired", "rollout/infra/unknown",
}
"""Every per-step metric a training run must log (reward, samples, merge failures by class, loss, optimizer,
staleness, the time split, throughput, the engine-trainer mismatch at lag 0 and the infra rate per cause)."""


def test_train_if_async_updates_checkpoints_to_s3_logs_and_resumes(prefect_api, tiny_model_dir, tmp_path, s3_endpoint,
                                                                    monkeypatch):
    from flows.named_flows import train_if

    monkeypatch.setenv("HARNESSRL_S3_ENDPOINT", s3_endpoint.endpoint)
    monkeypatch.setenv("HARNESSRL_S3_ACCESS_KEY", s3_endpoint.access_key)
    monkeypatch.setenv("HARNESSRL_S3_SECRET_KEY", s3_endpoint.secret_key)
    s3 = {"checkpoints.store": "s3://flow-test/checkpoints"}
    summary = train_if("if-local", overrides(tmp_path, tiny_model_dir, **s3))
    assert summary["iterations"] == 2 and summary["updates"] >= 1, summary
    client, run = mlflow_run(tmp_path, summary["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.params["rollout.schedule"] == "async"
    assert run.data.tags["checkpoint_uri"] == summary["checkpoint_uri"]
    uri = summary["checkpoint_uri"]
    assert uri.startswith("s3://flow-test/checkpoints/") and "tiny-if" in uri
    metrics = {key: [m.step for m in client.get_metric_history(run.info.run_id, key)]
               for key in ("rollout/reward_mean", "val/reward_mean", "loss/total", "time/weight_sync_s",
                           "staleness/lag_max", "train/grad_norm")}
    assert metrics["rollout/reward_mean"] == [1, 2] and metrics["val/reward_mean"] == [2]
    assert len(metrics["loss/total"]) == summary["updates"] and metrics["train/grad_norm"]
    assert client.get_metric_history(run.info.run_id, "train/policy_version")[-1].value >= 1
    missing = ISSUE_METRICS - set(run.data.metrics)
    assert not missing, sorted(missing)
    paths = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.json", "data", "trajectories"} <= paths

    resumed = train_if("if-local", overrides(tmp_path, tiny_model_dir, **s3, **{"algorithm.iterations": 3}))
    assert resumed["mlflow_run_id"] == summary["mlflow_run_id"], "a resumed run continues its MLflow run"
    assert resumed["iterations"] == 3
    client, run = mlflow_run(tmp_path, resumed["mlflow_run_id"])
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "rollout/reward_mean")]
    assert steps[-1] == 3 and steps.count(3) == 1
