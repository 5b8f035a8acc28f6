"""Flow `ablation`: arms x seeds of training runs of one recipe, every run in one MLflow experiment, comparable.

Each seed's training tasks are the recipe's `generate(train_tasks, seed)` (with the profile's `data.generator`
options), the same for every arm of that seed, less any whose family a validation task shares; the validation set is
`generate(val_tasks, VAL_SEED)`, the same for every run: a task file per seed (`data.source`) and one validation
file (`data.val_source`), so no split decides either. Every run lands in
the experiment `tracking.experiment`, tagged `ablation`, `arm`, `seed` and nested under an umbrella run named after
the ablation (`mlflow.parentRunId`), so the MLflow UI compares them side by side; `benchmarks/ablation_report.py`
turns them into the table with confidence intervals. Runs go seed by seed, each in a process of its own (flow
`ablation-run`, `python -m flows.ablation --run-config`): one process training 15 runs in turn grew by about 2.7 GB
per SmolLM2 run (11 GB after four) until it would have run out of memory, and a run that crashes its process must not
end the others. A failed run is reported and the others continue; starting the flow again with the same `name`
resumes each run from its last checkpoint.

Default arms: the Agent Lightning v1.0 report's three and an lr = 0 control (`flows.ablation_plan.ABLATION_ARMS`);
other arms (an lr sweep) are the `arms` parameter: `[{"name": "lr1e-5", "overrides": {"backend.optimizer.lr": 1e-5}}]`.
A learning experiment with controls is this flow with the arms `learning` (the profile as it is, and lr = 0; with
`learning+rerun` the trained configuration twice; `rerun` alone adds the second to an experiment run before) on any
profile, reported by `benchmarks/learning_report.py`:

    .venv/bin/python -m flows.ablation --profile calculator-local --arms learning --seeds 0 1 2 --name calc-learning
    .venv/bin/python benchmarks/learning_report.py --ablation calc-learning --experiment harnessrl

Step 0 (the validation before any update, when the profile's `algorithm.val_every` > 0, on the same seeded validation
set, `rollout.val_seed`) is measured once for every run that starts from the same weights and validates the same way:
the first such run records it in the ablation's `step0.json` (`algorithm.step0_file`, `flows/baseline.py`) and the
others log it from there, tagged `step0_from` (an arm that changes validation, e.g. the model or the temperature,
validates its own).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mlflow import MlflowClient
from prefect import flow

from controller.recipes import get_recipe
from flows.ablation_plan import (
    DEFAULT_SEEDS,
    VAL_SEED,
    PlannedRun,
    named_arms,
    parse_arms,
    plan_runs,
    seed_data_overrides,
    task_family,
)
from flows.config import PROJECT_ROOT, RunConfig, load_run_config
from flows.setup import run_folder
from flows.train import train
from rollouts.task_data import write_task_rows
from storage.files import write_atomic
from tracking.mlflow_tracker import MlflowTracker, ui_command

PARENT_RUN_TAG = "mlflow.parentRunId"


@flow(name="ablation", log_prints=True)
def ablation(profile: str = "ablation-local", arms: list[dict[str, Any]] | None = None,
             seeds: list[int] | None = None, overrides: dict[str, Any] | None = None, name: str | None = None,
             val_seed: int = VAL_SEED) -> dict[str, Any]:
    """Trains every arm x seed (default: the report's three arms x 5 seeds) on the profile's recipe; returns the
    ablation's name, experiment, umbrella run id and each run's outcome."""
    base = dict(overrides or {})
    config = load_run_config(profile, base)
    ablation_name = name or time.strftime("ablation-%Y%m%d-%H%M%S", time.gmtime())
    chosen_arms, chosen_seeds = parse_arms(arms), list(seeds if seeds is not None else DEFAULT_SEEDS)
    data = write_seed_tasks(config, ablation_name, chosen_seeds, val_seed)
    step0 = {"algorithm.step0_file": str(config.resolve(config.work_dir) / ablation_name / "step0.json")}
    runs = plan_runs(ablation_name, chosen_arms, chosen_seeds, {**step0, **base}, data)
    for run in runs:  # every run's config must load before the first one spends an hour
        load_run_config(profile, run.overrides)
    experiment = config.tracking.experiment
    umbrella = MlflowTracker(config.tracking_uri(), experiment, ablation_name,
                             tags={"ablation": ablation_name, "ablation_role": "umbrella", "recipe": config.recipe})
    outcomes: list[dict[str, Any]] = []
    with umbrella:
        umbrella.log_params({"profile": str(profile), "arms": json.dumps([a.name for a in chosen_arms]),
                             "seeds": json.dumps(chosen_seeds), "val_seed": val_seed,
                             "val_tasks": config.data.val_tasks, "train_tasks": config.data.train_tasks,
                             "overrides": json.dumps(base, sort_keys=True)})
        umbrella.log_text(json.dumps([{"name": a.name, "overrides": dict(a.overrides), "reference": a.reference}
                                      for a in chosen_arms], indent=2), "arms.json")
        for run in runs:
            outcomes.append(run_one(profile, run, ablation_name, umbrella.run_id, experiment,
                                    config.tracking_uri()))
    failed = [o["name"] for o in outcomes if o["error"]]
    print(f"ablation {ablation_name}: {len(outcomes) - len(failed)} of {len(outcomes)} runs finished in the MLflow "
          f"experiment {experiment!r}; report: .venv/bin/python benchmarks/ablation_report.py --tracking-uri "
          f"{config.tracking_uri()} --experiment {experiment} --ablation {ablation_name}")
    print(ui_command(config.tracking_uri()))
    if failed:
        raise RuntimeError(f"ablation {ablation_name}: runs {failed} failed (their errors are above); run the flow "
                           f"again with name={ablation_name!r} to resume them")
    return {"ablation": ablation_name, "experiment": experiment, "umbrella_run_id": umbrella.run_id,
            "runs": outcomes}


def write_seed_tasks(config: RunConfig, ablation_name: str, seeds: Sequence[int],
                     val_seed: int) -> dict[int, dict[str, Any]]:
    """One task file per seed (its training tasks + the shared validation set); each seed's data overrides."""
    recipe, options = get_recipe(config.recipe), dict(config.data.generator or {})
    val = [{**row, "recipe": config.recipe} for row in recipe.generate(config.data.val_tasks, val_seed, **options)]
    folder = config.resolve(config.work_dir) / ablation_name
    val_path = write_task_rows(val, folder / "val-tasks.jsonl")
    data = {}
    for seed in seeds:
        train_rows = [{**row, "recipe": config.recipe}
                      for row in recipe.generate(config.data.train_tasks, seed, **options)]
        train_rows = without_validation_families(train_rows, val, seed)
        path = write_task_rows(train_rows, folder / f"tasks-s{seed}.jsonl")
        data[seed] = seed_data_overrides(str(path), str(val_path), seed, len(train_rows), len(val))
    return data


def without_validation_families(train_rows: list[dict[str, Any]], val: list[dict[str, Any]],
                                seed: int) -> list[dict[str, Any]]:
    """The training rows of `seed` without those that share a family with a validation task (the same answer: a
    small generator's pool repeats across seeds, e.g. one SWE bug drawn by two seeds), said aloud; raises when none
    is left."""
    held_out = {task_family(row) for row in val}
    kept = [row for row in train_rows if task_family(row) not in held_out]
    if len(kept) < len(train_rows):
        print(f"seed {seed}: {len(train_rows) - len(kept)} of {len(train_rows)} training tasks left out, their "
              f"families are in the validation set; the seed trains on the other {len(kept)}")
    if not kept:
        raise ValueError(f"seed {seed}: every training task is in the validation set's families; raise "
                         "data.train_tasks or use other seeds")
    return kept


def run_one(profile: str | Path, run: PlannedRun, ablation_name: str, umbrella_id: str, experiment: str,
            tracking_uri: str) -> dict[str, Any]:
    """Trains one arm-seed in its own process and tags its MLflow run; an error is printed and returned, not
    raised."""
    print(f"ablation {ablation_name}: arm {run.arm.name}, seed {run.seed} (run {run.name})")
    started_s, error, summary = time.perf_counter(), None, {}
    config = load_run_config(profile, run.overrides)
    folder = config.resolve(config.work_dir) / ablation_name
    config_path = folder / f"{run.name}.run.json"  # what the run's process loads, as this process did
    write_atomic(config_path, json.dumps({"profile": str(profile), "overrides": dict(run.overrides)}, indent=2))
    summary_path = folder / f"{run.name}.summary.json"
    summary_path.unlink(missing_ok=True)
    done = subprocess.run([sys.executable, "-m", "flows.ablation", "--run-config", str(config_path), "--summary",
                           str(summary_path)], cwd=PROJECT_ROOT, env=run_environment(), check=False)
    if done.returncode == 0 and summary_path.is_file():
        summary = json.loads(summary_path.read_text())
        drop_local_checkpoints(run_folder(config, run.name))
    else:
        error = f"the run's process exited with code {done.returncode} (its output is above)"
        print(f"run {run.name} failed: {error}")
    tags = {"ablation": ablation_name, "arm": run.arm.name, "seed": str(run.seed), PARENT_RUN_TAG: umbrella_id,
            "ablation_role": "arm-run"}
    run_id = summary.get("mlflow_run_id") or find_run_id(tracking_uri, experiment, run.name)
    if run_id is not None:
        tag_run(tracking_uri, run_id, tags)
    return {"name": run.name, "arm": run.arm.name, "seed": run.seed, "mlflow_run_id": run_id, "error": error,
            "wall_s": round(time.perf_counter() - started_s, 1)}


def drop_local_checkpoints(run_dir: Path) -> None:
    """Deletes a finished run's local checkpoints (`run_dir/checkpoints`: 1.6 GB for SmolLM2-135M with its AdamW
    state): the checkpoint store holds the same ones, and a resume or an evaluation reads the store's. An ablation's
    20 runs would otherwise keep 32 GB twice."""
    local = run_dir / "checkpoints"
    if local.is_dir():
        shutil.rmtree(local)
        print(f"deleted the finished run's local checkpoints {local} (the checkpoint store keeps them)")


def run_environment() -> dict[str, str]:
    """This process's environment, with the Prefect API it uses (a temporary server's too, so a run's process does
    not start another one)."""
    from prefect.settings import PREFECT_API_URL

    env = dict(os.environ)
    url = PREFECT_API_URL.value()
    if not url:
        from prefect.server.api.server import SubprocessASGIServer

        server = SubprocessASGIServer()  # the temporary server of this process, when it started one
        url = server.api_url if server.server_process is not None else None
    if url:
        env["PREFECT_API_URL"] = url
    return env


@flow(name="ablation-run", log_prints=True)
def ablation_run(config_path: str, summary_path: str) -> dict[str, Any]:
    """One arm-seed: trains the profile and overrides at `config_path` (JSON: {profile, overrides}) and writes its
    summary to `summary_path`."""
    spec = json.loads(Path(config_path).read_text())
    summary = train(load_run_config(spec["profile"], spec["overrides"]))
    write_atomic(Path(summary_path), json.dumps(summary, default=str))
    return summary


def find_run_id(tracking_uri: str, experiment: str, run_name: str) -> str | None:
    """The newest MLflow run named `run_name` in `experiment` (a failed run's), or None."""
    client = MlflowClient(tracking_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    runs = client.search_runs([found.experiment_id], f"tags.`mlflow.runName` = '{run_name}'",
                              order_by=["attribute.start_time DESC"], max_results=1)
    return runs[0].info.run_id if runs else None


def tag_run(tracking_uri: str, run_id: str, tags: Mapping[str, str]) -> None:
    """Sets `tags` on an MLflow run (finished or not)."""
    client = MlflowClient(tracking_uri=tracking_uri)
    for key, value in tags.items():
        client.set_tag(run_id, key, value)


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m flows.ablation [--name N] [--seeds 0 1 2] [--arms arms.json] [--profile P] [--set key=value]`:
    the flow in this process (Prefect starts a temporary server for it), with `harnessrl train`'s environment."""
    import argparse

    from flows.cli import PREFECT_DEFAULTS, parse_overrides

    parser = argparse.ArgumentParser(description="Run the ablation flow here.")
    parser.add_argument("--name", default=None, help="the ablation's name (also the resume key)")
    parser.add_argument("--profile", default="ablation-local")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help=f"default {list(DEFAULT_SEEDS)}")
    parser.add_argument("--arms", default=None, help="a JSON file (a list of {name, overrides, reference}) or a named "
                        "set: report+lr0 (the default: the report's three arms and lr = 0), report, learning "
                        "(trained, lr0), learning+rerun (trained, trained-rerun, lr0), rerun (trained-rerun alone)")
    parser.add_argument("--set", dest="set_", action="append", default=[], help="key.path=value (repeatable)")
    parser.add_argument("--run-config", type=Path, default=None, help="(internal) train one run: a JSON file of "
                        "{profile, overrides}")
    parser.add_argument("--summary", type=Path, default=None, help="(internal) where --run-config writes its summary")
    args = parser.parse_args(argv)
    for key, value in PREFECT_DEFAULTS.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("PREFECT_HOME", str(Path(".prefect").resolve()))
    if args.run_config is not None:
        if args.summary is None:
            parser.error("--run-config needs --summary")
        ablation_run(str(args.run_config), str(args.summary))
        return
    arms = None if args.arms is None else (json.loads(Path(args.arms).read_text()) if Path(args.arms).is_file()
                                           else named_arms(args.arms))
    ablation(args.profile, arms=arms, seeds=args.seeds, overrides=parse_overrides(args.set_), name=args.name)


if __name__ == "__main__":
    main()
