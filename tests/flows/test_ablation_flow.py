"""The ablation flow end to end on the tiny model, as `benchmarks/ablation.md` runs it: one of the report's arms (the
sample-level advantage) and the lr = 0 control (the profile's rollout-level advantage: both levels, each set by a
different source, the arm's overrides or the profile) x one seed, validation before the update and after it, every
run in one MLflow experiment tagged and nested under the umbrella run; every validation call seeded; step 0 measured
once, by the first run, and logged by the other (`algorithm.step0_file`), whose advantage level and lr differ; the
control's validation after its update the same calls with the same seeds and the same answers as that step 0; both
report generators read the runs back (the arms' comparison and spread, and the learning report with its page and PNGs
logged to the umbrella run). One flow for every test of the module, since a flow's start and each run (about 30 s of
processes: the run's own Python, engine, gateway and controller) cost most of it: two runs, not three (a second
report arm ran the same code with other values; the default arms are the report's three and lr0, each loaded on the
profile by tests/flows/test_ablation_plan.py, and what of an arm's overrides step 0 may share is
tests/flows/test_baseline.py's)."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


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


@pytest.fixture(scope="module")
def experiment(prefect_api, tiny_model_dir, tmp_path_factory):
    """The ablation `abl-test`: arms sample-level and lr0, seed 3, one iteration, validated at 0, 1."""
    from flows.ablation import ablation
    from flows.ablation_plan import LEARNING_ARMS, REPORT_ARMS

    tmp_path = tmp_path_factory.mktemp("ablation")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    overrides = {
        "work_dir": str(tmp_path / "runs"), "engine.model": str(tiny_model_dir), "engine.max_batch_size": 16,
        "data.train_tasks": 2, "data.val_tasks": 2, "rollout.group_size": 4, "rollout.batch_groups": 1,
        "rollout.max_inflight_groups": 1, "rollout.task_overrides": {"max_tokens": 8}, "rollout.wait_timeout_s": 300,
        "controller.concurrency": 4, "backend.optimizer.lr": 1e-3, "backend.schedule.max_tokens_per_micro_batch": 2048,
        "algorithm.iterations": 1, "algorithm.val_every": 1, "tracking.tracking_uri": uri,
        "tracking.trajectories_per_step": 0, "checkpoints.store": f"file://{tmp_path / 'store'}",
    }
    arms = (REPORT_ARMS[1], LEARNING_ARMS[1])
    out = ablation("ablation-local", arms=[{"name": a.name, "overrides": a.overrides, "reference": a.reference}
                                           for a in arms], seeds=[3], overrides=overrides, name="abl-test")
    return {"out": out, "uri": uri, "arms": arms, "tmp": tmp_path}


def test_ablation_runs_every_arm_on_one_experiment_and_the_report_reads_them(experiment):
    from mlflow import MlflowClient

    from benchmarks.ablation_report import flow_wall_s, read_finals, read_split_spread, render

    out, uri, arms = experiment["out"], experiment["uri"], experiment["arms"]
    assert [(r["arm"], r["seed"], r["error"]) for r in out["runs"]] == [(a.name, 3, None) for a in arms]
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("ablation").experiment_id], "tags.ablation = 'abl-test'")
    children = [r for r in runs if r.data.tags.get("ablation_role") == "arm-run"]
    assert len(runs) == len(arms) + 1 and len(children) == len(arms)
    for run in children:
        assert run.info.status == "FINISHED" and run.data.tags["seed"] == "3"
        assert run.data.tags["mlflow.parentRunId"] == out["umbrella_run_id"]
        assert run.data.params["data.seed"] == "3" and run.data.params["data.val_tasks"] == "2"
        assert run.data.metrics["val/rollouts"] == 2.0
        assert "samples/samples_per_rollout_mean" in run.data.metrics
    levels = {r.data.tags["arm"]: r.data.params["algorithm.advantage.level"] for r in children}
    assert levels == {"sample-adv+token-mean": "sample", "lr0": "rollout"}
    assert {r.data.tags["arm"]: r.data.params["backend.optimizer.lr"] for r in children}["lr0"] == "0.0"
    by_arm = {a.name: a for a in arms}
    for run in children:  # every override of its arm, and only its arm's (the lr of one is not the other's)
        assert {key: run.data.params[key] for key in by_arm[run.data.tags["arm"]].overrides} == {
            key: str(value) for key, value in by_arm[run.data.tags["arm"]].overrides.items()}
    assert len({r.data.params["backend.optimizer.lr"] for r in children}) == 2
    sources = {r.data.params["data.source"] for r in children}
    assert len(sources) == 1, "every arm of a seed trains on the same task file"

    finals, wall_s = read_finals(uri, "ablation", "abl-test")
    assert set(finals) == {a.name for a in arms} and all(set(v) == {3} for v in finals.values())
    assert set(wall_s) == set(finals) and all(0 < s < 3600 for v in wall_s.values() for s in v.values())
    spread = read_split_spread(uri, "ablation", "abl-test")
    assert set(spread) == set(finals) and all(set(v) == {3} for v in spread.values()), "every run logged its splits"
    assert all(variance >= 0 and 0 <= share <= 1 for v in spread.values() for variance, share in v.values())
    assert "(one seed: no interval)" in render("abl-test", "ablation", finals, wall_s, spread=spread)
    (flow,) = flow_wall_s(uri, "ablation", "abl-test")  # the umbrella run spans every run and the gaps between them
    assert sum(wall_s[a.name][3] for a in arms) < flow < 3600


def test_step0_is_measured_once_seeded_and_the_control_reproduces_it(experiment):
    from mlflow import MlflowClient

    from flows.ablation_plan import run_name

    out, uri, arms, tmp_path = experiment["out"], experiment["uri"], experiment["arms"], experiment["tmp"]
    client = MlflowClient(uri)
    histories = [client.get_metric_history(o["mlflow_run_id"], "val/reward_mean") for o in out["runs"]]
    assert [[point.step for point in history] for history in histories] == [[0, 1]] * len(arms), "step 0 and after"
    assert len({history[0].value for history in histories}) == 1, "one step 0 for every arm"
    first, lr0 = (tmp_path / "runs" / run_name("abl-test", arm, 3) for arm in arms)
    tags = [client.get_run(o["mlflow_run_id"]).data.tags for o in out["runs"]]
    assert [t.get("step0_from") for t in tags] == [first.name] * len(arms), "measured once, by the first run"
    step0 = val_calls(first, f"{first.name}-val0-")
    assert len(step0) == 2 and all(None not in [seed for seed, _ in calls] for calls in step0.values()), "seeded"
    assert val_calls(lr0, f"{lr0.name}-val0-") == {}, "the control logged the shared step 0, it did not validate"
    assert val_calls(lr0, f"{lr0.name}-val1-") == step0, ("lr = 0: the base weights again, the same seeds: the same "
                                                          "answers as the shared step 0, call by call")


def test_the_learning_report_compares_each_arm_with_step0_and_the_control(experiment):
    from mlflow import MlflowClient

    from benchmarks.learning_report import main as report

    out, uri, tmp_path = experiment["out"], experiment["uri"], experiment["tmp"]
    page = tmp_path / "learning.md"
    report(["--ablation", "abl-test", "--experiment", "ablation", "--tracking-uri", uri, "--control", "lr0",
            "--out", str(page), "--images", str(tmp_path / "images")])
    text = page.read_text()
    for arm in [a.name for a in experiment["arms"] if a.name != "lr0"]:
        assert f"| {arm}: step 1 - step 0 | 1 |" in text and f"| {arm} - lr0 at step 1 | 1 |" in text
    logged = {a.path for a in MlflowClient(uri).list_artifacts(out["umbrella_run_id"], "learning-report")}
    assert logged == {"learning-report/abl-test-curves.png", "learning-report/abl-test-claims.png",
                      "learning-report/learning.md"}
