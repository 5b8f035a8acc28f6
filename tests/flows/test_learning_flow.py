"""A learning experiment end to end on the tiny model: flow `ablation` with the arms `learning` (the profile and its
lr = 0 control) x one seed, validation before the update and after it; every validation call seeded; step 0
measured once, by the first run, and logged by both (`algorithm.step0_file`); the control's validation after its
update the same calls with the same seeds and the same answers as that step 0; the learning report reads the runs
back, writes its page and PNGs and logs them to the umbrella run. (Two runs, 2 min 6 s in all on the loaded 2
cores.)"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def val_calls(run_dir, prefix: str) -> dict[str, list[tuple[int | None, str | None]]]:
    """rollout id (without the run's name) -> its calls' (seed, answer text) in order, from the run's gateway store."""
    import orjson
    import sqlalchemy as sa

    engine = sa.create_engine(f"sqlite:///{run_dir / 'gateway.db'}")
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT rollout_id, seq, sampling, response_text FROM calls "
                                    "WHERE rollout_id LIKE :prefix ORDER BY rollout_id, attempt, seq"),
                            {"prefix": f"{prefix}%"}).all()
    engine.dispose()
    calls: dict[str, list] = {}
    for rollout_id, _, sampling, text in rows:
        seed = orjson.loads(sampling).get("seed") if sampling else None
        calls.setdefault(rollout_id.removeprefix(prefix), []).append((seed, text))
    return calls


def test_a_learning_experiment_runs_both_arms_seeded_and_the_report_reads_it(prefect_api, tiny_model_dir, tmp_path):
    from mlflow import MlflowClient

    from benchmarks.learning_report import main as report
    from flows.ablation import ablation
    from flows.ablation_plan import named_arms, parse_arms, run_name

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    overrides = {
        "work_dir": str(tmp_path / "runs"), "engine.model": str(tiny_model_dir), "engine.max_batch_size": 16,
        "data.train_tasks": 2, "data.val_tasks": 2, "rollout.group_size": 4, "rollout.batch_groups": 1,
        "rollout.max_inflight_groups": 1, "rollout.task_overrides": {"max_tokens": 8}, "rollout.wait_timeout_s": 300,
        "controller.concurrency": 4, "backend.schedule.max_tokens_per_micro_batch": 2048,
        "algorithm.iterations": 1, "algorithm.val_every": 1, "tracking.tracking_uri": uri,
        "tracking.trajectories_per_step": 0, "checkpoints.store": f"file://{tmp_path / 'store'}",
    }
    arms = named_arms("learning")
    out = ablation("ablation-local", arms=arms, seeds=[3], overrides=overrides, name="learn-test")
    assert [(r["arm"], r["error"]) for r in out["runs"]] == [("trained", None), ("lr0", None)]

    client = MlflowClient(uri)
    histories = [client.get_metric_history(o["mlflow_run_id"], "val/reward_mean") for o in out["runs"]]
    assert [[point.step for point in history] for history in histories] == [[0, 1], [0, 1]], "step 0 and after"
    assert histories[0][0].value == histories[1][0].value, "one step 0 for both arms"
    trained, lr0 = (tmp_path / "runs" / run_name("learn-test", arm, 3) for arm in parse_arms(arms))
    tags = [client.get_run(o["mlflow_run_id"]).data.tags for o in out["runs"]]
    assert [t.get("step0_from") for t in tags] == [trained.name, trained.name], "measured once, by the first run"
    step0 = val_calls(trained, f"{trained.name}-val0-")
    assert len(step0) == 2 and all(None not in [seed for seed, _ in calls] for calls in step0.values()), "seeded"
    assert val_calls(lr0, f"{lr0.name}-val0-") == {}, "the control logged the shared step 0, it did not validate"
    assert val_calls(lr0, f"{lr0.name}-val1-") == step0, ("lr = 0: the base weights again, the same seeds: the same "
                                                          "answers as the shared step 0, call by call")

    page = tmp_path / "learning.md"
    report(["--ablation", "learn-test", "--experiment", "ablation", "--tracking-uri", uri, "--out", str(page),
            "--images", str(tmp_path / "images")])
    text = page.read_text()
    assert "| trained: step 1 - step 0 | 1 |" in text and "| trained - lr0 at step 1 | 1 |" in text
    logged = {a.path for a in client.list_artifacts(out["umbrella_run_id"], "learning-report")}
    assert logged == {"learning-report/learn-test-curves.png", "learning-report/learn-test-claims.png",
                      "learning-report/learning.md"}
