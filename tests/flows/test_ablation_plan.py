"""flows/ablation_plan.py: arms as data, the arm x seed plan, each seed's task file and the one validation file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.ablation_plan import (
    REPORT_ARMS,
    Arm,
    PlannedRun,
    parse_arms,
    plan_runs,
    run_name,
    seed_data_overrides,
)
from flows.config import PROFILES_DIR, load_run_config
from recipes.multistep.tasks import generate
from rollouts.task_data import write_task_rows


def test_the_instruction_following_lr_sweep_arms_load_on_their_profile_with_an_lr_0_control():
    arms = parse_arms(json.loads((PROFILES_DIR / "if-lr-arms.json").read_text()))
    rates = [load_run_config("if-local", dict(arm.overrides)).backend.optimizer.lr for arm in arms]
    assert [arm.name for arm in arms] == ["lr0", "lr3e-5", "lr1e-4"] and rates == [0.0, 3e-5, 1e-4]


def test_report_arms_are_the_three_of_the_report_and_load_on_the_profile():
    assert [(a.overrides["algorithm.advantage.level"], a.overrides["backend.loss.agg_mode"], a.reference)
            for a in REPORT_ARMS] == [("rollout", "rollout-token-mean", 38.2), ("sample", "token-mean", 35.0),
                                      ("rollout", "token-mean", 33.1)]
    for arm in REPORT_ARMS:
        config = load_run_config("ablation-local", dict(arm.overrides))
        assert config.recipe == "multistep"
        assert (config.algorithm.advantage.level, config.backend.loss.agg_mode) == tuple(arm.overrides.values())


def test_parse_arms_defaults_to_the_report_and_takes_other_arms_as_data():
    assert parse_arms(None) == (*REPORT_ARMS, Arm("lr0", {"backend.optimizer.lr": 0.0}))
    sweep = parse_arms([{"name": "lr0", "overrides": {"backend.optimizer.lr": 0.0}},
                        {"name": "lr1e-4", "overrides": {"backend.optimizer.lr": 1e-4}}])
    assert sweep == (Arm("lr0", {"backend.optimizer.lr": 0.0}), Arm("lr1e-4", {"backend.optimizer.lr": 1e-4}))
    with pytest.raises(ValueError, match="unique names"):
        parse_arms([{"name": "a"}, {"name": "a"}])
    with pytest.raises(ValueError, match="letters, digits"):
        parse_arms([{"name": "a b"}])


def test_plan_is_seed_major_with_the_seed_data_and_the_arm_overrides_on_top():
    data = {seed: seed_data_overrides(f"/t/s{seed}.jsonl", "/t/val.jsonl", seed, 10, 4) for seed in (0, 1)}
    runs = plan_runs("abl", REPORT_ARMS, [0, 1], {"algorithm.iterations": 3, "backend.loss.agg_mode": "x"}, data)
    assert [(r.seed, r.arm.name) for r in runs] == [(s, a.name) for s in (0, 1) for a in REPORT_ARMS]
    first = runs[0]
    assert first.name == run_name("abl", REPORT_ARMS[0], 0) == "abl-rollout-adv_rollout-token-mean-s0"
    assert first.overrides == {"algorithm.iterations": 3, "backend.loss.agg_mode": "rollout-token-mean",
                               "algorithm.advantage.level": "rollout", "data.source": "/t/s0.jsonl",
                               "data.val_source": "/t/val.jsonl", "data.seed": 0, "data.train_tasks": 10,
                               "data.val_tasks": 4, "name": first.name}
    assert len({r.name for r in runs}) == 6
    with pytest.raises(ValueError, match="distinct"):
        plan_runs("abl", REPORT_ARMS, [0, 0], {}, data)


def test_a_given_validation_file_is_the_validation_set_whatever_the_rows_strata(tmp_path, monkeypatch):
    """data.val_source: no split decides the validation set, so rows with a `level` (the split's strata, which an
    arrangement for the unstratified split got wrong for the SWE ladder) keep it exactly; a task in both files is
    refused by name."""
    from types import SimpleNamespace

    from flows import train
    from flows.train import load_rows

    monkeypatch.setattr(train, "load_dataset", train.load_dataset.fn)
    rows = [{**row, "level": level} for row, level in zip(generate(12, 5), [0, 0, 0, 3] * 3, strict=True)]
    train_file = write_task_rows(rows[:8], tmp_path / "train.jsonl")
    val_file = write_task_rows(rows[8:], tmp_path / "val.jsonl")
    overrides = {"work_dir": str(tmp_path), "data.source": str(train_file), "data.val_source": str(val_file),
                 "data.train_tasks": 8, "data.val_tasks": 4}
    for seed in (0, 1, 7):
        config = load_run_config("ablation-local", {**overrides, "data.seed": seed})
        got_train, got_val = load_rows(config, SimpleNamespace(run_dir=tmp_path / f"run-{seed}"))
        assert [r["id"] for r in got_val] == [r["id"] for r in rows[8:]]
        assert [r["id"] for r in got_train] == [r["id"] for r in rows[:8]]
    leaky = write_task_rows(rows[6:], tmp_path / "leaky.jsonl")
    config = load_run_config("ablation-local", {**overrides, "data.val_source": str(leaky)})
    with pytest.raises(ValueError, match="in both data.source and data.val_source"):
        load_rows(config, SimpleNamespace(run_dir=tmp_path / "run-leaky"))
    with pytest.raises(ValueError, match="versioned split"):
        load_run_config("ablation-local", {**overrides, "data.source": "splits:s3://b/x"})


def test_every_seed_file_loads_through_the_training_flow_into_its_tasks_and_the_shared_validation_set(
        tmp_path, monkeypatch):
    from types import SimpleNamespace

    from flows import train
    from flows.ablation import write_seed_tasks
    from flows.train import load_rows

    monkeypatch.setattr(train, "load_dataset", train.load_dataset.fn)  # the Prefect task's function, no server

    config = load_run_config("ablation-local", {"work_dir": str(tmp_path), "data.train_tasks": 6,
                                                "data.val_tasks": 5})
    data = write_seed_tasks(config, "abl", [0, 1], val_seed=99)
    loaded = {}
    for seed in (0, 1):
        run_config = load_run_config("ablation-local", {"work_dir": str(tmp_path), **data[seed]})
        loaded[seed] = load_rows(run_config, SimpleNamespace(run_dir=tmp_path / f"run-{seed}"))
    (train0, val0), (train1, val1) = loaded[0], loaded[1]
    assert val0 == val1 and [r["id"] for r in val0] == [r["id"] for r in generate(5, 99)]
    assert [r["id"] for r in train0] == [r["id"] for r in generate(6, 0)]
    assert [r["id"] for r in train1] == [r["id"] for r in generate(6, 1)]
    assert train0[0]["steps"] == generate(6, 0)[0]["steps"], "nested fields survive the task file"


@pytest.mark.slow
def test_a_run_is_a_process_of_its_own_and_its_crash_is_an_outcome(tmp_path, monkeypatch):
    """Each arm-seed trains in `python -m flows.ablation --run-config` (one process for 15 SmolLM2 runs grew by
    about 2.7 GB a run); the process gets the run's profile and overrides, and a crash is reported, not raised."""
    import json
    import subprocess

    from flows import ablation

    calls = []

    def crashed(command, **kwargs):
        calls.append((command, kwargs))
        return subprocess.CompletedProcess(command, 137)

    monkeypatch.setattr(ablation.subprocess, "run", crashed)
    run = PlannedRun(REPORT_ARMS[0], 2, "abl-x-s2", {"work_dir": str(tmp_path), "data.seed": 2})
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: "http://127.0.0.1:4999/api"}):
        outcome = ablation.run_one("ablation-local", run, "abl-x", "umbrella", "ablation",
                                   f"sqlite:///{tmp_path}/m.db")
    assert outcome["error"] == "the run's process exited with code 137 (its output is above)"
    assert (outcome["arm"], outcome["seed"], outcome["mlflow_run_id"]) == (REPORT_ARMS[0].name, 2, None)
    command, kwargs = calls[0]
    assert command[1:4] == ["-m", "flows.ablation", "--run-config"] and command[5] == "--summary"
    assert json.loads(Path(command[4]).read_text()) == {"profile": "ablation-local", "overrides": run.overrides}
    assert kwargs["env"]["PREFECT_API_URL"] == "http://127.0.0.1:4999/api"  # the parent's: the run starts no other


def test_a_seed_never_trains_on_a_validation_family_and_says_how_many_it_left_out(capsys):
    from flows.ablation import without_validation_families

    val = [{"id": "bug.a__l0", "family": "bug.a"}, {"id": "bug.b"}]
    train = [{"id": "bug.a", "family": "bug.a"}, {"id": "bug.b"}, {"id": "bug.c"},
             {"id": "bug.d__l3", "family": "bug.d"}]
    kept = without_validation_families(train, val, seed=7)
    assert [row["id"] for row in kept] == ["bug.c", "bug.d__l3"]
    assert "seed 7: 2 of 4 training tasks left out" in capsys.readouterr().out
    with pytest.raises(ValueError, match="seed 7: every training task"):
        without_validation_families(train[:2], val, seed=7)


def test_each_seed_and_the_validation_set_are_drawn_with_the_profiles_generator_options(tmp_path, monkeypatch):
    """`data.generator` (the SWE ladder's mix in swe-local) reaches the recipe's `generate` for the validation set and
    every seed's training tasks (it was dropped: the tasks were drawn at the original level only)."""
    from flows import ablation

    drawn: list[tuple[int, int, dict]] = []

    class Recipe:
        def generate(self, count: int, seed: int, **options):
            drawn.append((count, seed, options))
            return [{"id": f"s{seed}-{i}", "level": 0} for i in range(count)]

    monkeypatch.setattr(ablation, "get_recipe", lambda name: Recipe())
    config = load_run_config("swe-local", {"work_dir": str(tmp_path), "data.train_tasks": 3, "data.val_tasks": 2})
    data = ablation.write_seed_tasks(config, "abl", [0, 1], val_seed=99)
    levels = {"levels": {0: 0.75, 3: 0.25}}
    assert drawn == [(2, 99, levels), (3, 0, levels), (3, 1, levels)]
    assert data[0]["data.val_source"] == data[1]["data.val_source"] != data[0]["data.source"]
