"""The ablation flow end to end on the tiny model: two of the report's arms (the advantage levels) x one seed, one
iteration each, every run in one MLflow experiment tagged and nested under the umbrella run, scored on the same
validation set; the report generator reads them back. (A run takes about 50 s here; the default arms are the report's
three, tests/flows/test_ablation_plan.py.)"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_ablation_runs_every_arm_on_one_experiment_and_the_report_reads_them(prefect_api, tiny_model_dir, tmp_path):
    from mlflow import MlflowClient

    from benchmarks.ablation_report import flow_wall_s, read_finals, read_split_spread, render
    from flows.ablation import ablation
    from flows.ablation_plan import REPORT_ARMS

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    overrides = {
        "work_dir": str(tmp_path / "runs"), "engine.model": str(tiny_model_dir), "engine.max_batch_size": 16,
        "data.train_tasks": 2, "data.val_tasks": 2, "rollout.group_size": 4, "rollout.batch_groups": 1,
        "rollout.max_inflight_groups": 1, "rollout.task_overrides": {"max_tokens": 8}, "rollout.wait_timeout_s": 300,
        "controller.concurrency": 4, "backend.optimizer.lr": 1e-3, "backend.schedule.max_tokens_per_micro_batch": 2048,
        "algorithm.iterations": 1, "tracking.tracking_uri": uri, "tracking.trajectories_per_step": 0,
        "checkpoints.store": f"file://{tmp_path / 'store'}",
    }
    arms = REPORT_ARMS[:2]
    out = ablation("ablation-local", arms=[{"name": a.name, "overrides": a.overrides, "reference": a.reference}
                                           for a in arms], seeds=[3], overrides=overrides, name="abl-test")
    assert [(r["arm"], r["seed"], r["error"]) for r in out["runs"]] == [(a.name, 3, None) for a in arms]

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("ablation")
    runs = client.search_runs([experiment.experiment_id], "tags.ablation = 'abl-test'")
    children = [r for r in runs if r.data.tags.get("ablation_role") == "arm-run"]
    assert len(runs) == 3 and len(children) == 2
    for run in children:
        assert run.info.status == "FINISHED" and run.data.tags["seed"] == "3"
        assert run.data.tags["mlflow.parentRunId"] == out["umbrella_run_id"]
        assert run.data.params["data.seed"] == "3" and run.data.params["data.val_tasks"] == "2"
        assert run.data.metrics["val/rollouts"] == 2.0
        assert "samples/samples_per_rollout_mean" in run.data.metrics
    levels = {r.data.tags["arm"]: r.data.params["algorithm.advantage.level"] for r in children}
    assert levels == {a.name: a.overrides["algorithm.advantage.level"] for a in arms} == {
        "rollout-adv+rollout-token-mean": "rollout", "sample-adv+token-mean": "sample"}
    sources = {r.data.params["data.source"] for r in children}
    assert len(sources) == 1, "every arm of a seed trains on the same task file"

    finals, wall_s = read_finals(uri, "ablation", "abl-test")
    assert set(finals) == {a.name for a in arms} and all(set(v) == {3} for v in finals.values())
    assert set(wall_s) == set(finals) and all(0 < s < 3600 for v in wall_s.values() for s in v.values())
    spread = read_split_spread(uri, "ablation", "abl-test")
    assert set(spread) == set(finals) and all(set(v) == {3} for v in spread.values()), "every run logged its splits"
    assert all(variance >= 0 and 0 <= share <= 1 for v in spread.values() for variance, share in v.values())
    assert "(one seed: no interval)" in render("abl-test", "ablation", finals, wall_s, spread=spread)
    (flow,) = flow_wall_s(uri, "ablation", "abl-test")  # the umbrella run spans both runs and the gap between them
    assert sum(wall_s[a.name][3] for a in arms) < flow < 3600
