"""The training flow `train`: one loop for every recipe, read top to bottom as the algorithm.

The recipe is a parameter (a registered name, a recipe file, `module:OBJECT`); whatever is recipe-specific (extra
metrics, the shaping term's shares, the no-signal hint, the data expectations) comes from the recipe's optional hooks
(`rollouts.recipe.RecipeHooks`), so the loop names no recipe. The training deployments are deployments of this flow,
some under the flow names they had when each recipe had a flow of its own (`flows/named_flows.py`).

load and validate data → start (or connect to) engine, gateway and controller → per iteration: keep groups of n
rollouts in flight → wait for enough complete groups → drop too-stale rollouts → samples → advantages → collocated
update (pause, drain, sleep, train, refit, wake, resume) → checkpoint → log → periodic validation in val mode.

The schedule (`rollout.schedule`) only changes how many groups are in flight: one batch (sync) or more (async,
the default), so unfinished rollouts continue under the new policy while the next batch fills.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from tqdm.auto import trange

from engines.model_cache import resolve_model
from flows.baseline import read_baseline, record_baseline, validation_fingerprint
from flows.config import RunConfig, load_run_config
from flows.prefect_tasks.data import SPLITS_PREFIX, load_dataset, load_versioned_splits, split_tasks, validate_tasks
from flows.prefect_tasks.rollouts import collect_groups, fill_in_flight, run_validation
from flows.prefect_tasks.tracking import log_rollout_traces, log_trajectories
from flows.prefect_tasks.training import (
    build_batch,
    find_resume_point,
    load_backend,
    publish_checkpoint,
    token_decoder,
    update_policy,
)
from flows.run_processes import RunProcesses
from flows.setup import (
    RunPlan,
    build_backend,
    checkpoint_store,
    feed_config,
    fresh_plan,
    in_flight_target,
    process_settings,
    resumed_plan,
    run_name,
    splits_store,
    task_mix,
    task_stream,
    upload_due,
    validation_due,
)
from rollouts.feed import RolloutFeed
from rollouts.groups import FinishedGroup
from rollouts.infra_rate import infra_metrics
from rollouts.recipe import RecipeHooks, recipe_hooks
from rollouts.registry import get_recipe
from storage.checkpoint_store import CheckpointStore
from tracking.mlflow_tracker import MlflowTracker, ui_command
from tracking.reports import (
    no_signal_message,
    rollout_phase_metrics,
    summary_lines,
    throughput_metrics,
    trajectory_items,
)
from tracking.rollout_traces import train_selection
from tracking.tracker import Tracker
from trainer.backends.base import Backend
from trainer.collocation import UpdateResult
from trainer.dynamic_sampling import collect_with_signal, group_has_signal
from trainer.loop_state import LoopState

log = logging.getLogger(__name__)


@flow(name="train", log_prints=True)
def train_flow(profile: str | None = None, overrides: dict[str, Any] | None = None, recipe: str | None = None,
               recipe_file: str | None = None) -> dict[str, Any]:
    """Trains `recipe` (a registered name or module:OBJECT) or the recipe file `recipe_file` with `profile` (a profile
    name or YAML path; none: the defaults and the recipe's own settings) and `overrides` (dotted keys)."""
    return train(load_run_config(profile, overrides, recipe_reference(recipe, recipe_file)))


def recipe_reference(recipe: str | None, recipe_file: str | None) -> str | None:
    """The recipe the flow was asked for: `recipe`, or the recipe file (absolute: a worker may run elsewhere)."""
    if recipe and recipe_file:
        raise ValueError(f"recipe={recipe!r} and recipe_file={recipe_file!r}: give one of them")
    return str(Path(recipe_file).expanduser().resolve()) if recipe_file else recipe


def train(config: RunConfig) -> dict[str, Any]:
    """The training loop shared by the flows; returns the run's summary (MLflow run id, last checkpoint URI, ...)."""
    store = checkpoint_store(config)
    plan = plan_run(config, store)
    train_rows, val_rows = load_rows(config, plan)
    report = validate_tasks(train_rows + val_rows, config.recipe)  # a failed suite stops the flow with its report
    tracker = MlflowTracker(config.tracking_uri(), config.tracking.experiment, plan.name,
                            tags={"recipe": config.recipe_label(), "schedule": config.rollout.schedule},
                            run_id=plan.state.tracking_run_id)
    summary: dict[str, Any] = {"run_name": plan.name, "mlflow_run_id": tracker.run_id, "checkpoint_uri": None,
                               "iterations": 0, "updates": 0, "no_signal_iterations": 0}
    with tracker:  # FINISHED, or FAILED / KILLED on any error from here on
        if plan.resumed_from is None:
            tracker.log_params(config.model_dump(mode="json"))
        tracker.log_dict(config.model_dump(mode="json"), "config.json")
        tracker.log_text(report.to_markdown(), "data/validation.md")
        backend = load_backend(build_backend(config, plan))
        with RunProcesses(process_settings(config, plan)) as processes:
            run_iterations(config, plan, processes, backend, tracker, store, train_rows, val_rows, summary)
    for line in summary_lines(summary, ui_command(config.tracking_uri())):
        print(line)
    return summary


def load_rows(config: RunConfig, plan: RunPlan) -> tuple[list[dict], list[dict]]:
    """Training and validation tasks: a versioned split (`splits:URI`), data.source and data.val_source, else
    data.source split by data.seed."""
    data = config.data
    if data.source.startswith(SPLITS_PREFIX):
        train_rows, val_rows = load_versioned_splits(data.source, config.recipe, plan.run_dir / "splits",
                                                     lambda root: splits_store(config, root))
        return train_rows[:data.train_tasks], val_rows[:data.val_tasks]
    if data.val_source is not None:
        return load_given_validation(config, plan)
    rows = load_dataset(data.source, recipe=config.recipe, count=data.train_tasks + data.val_tasks, seed=data.seed,
                        cache_dir=plan.run_dir / "data", generator=data.generator or None)
    return split_tasks(rows, data.val_tasks, data.seed)


def load_given_validation(config: RunConfig, plan: RunPlan) -> tuple[list[dict], list[dict]]:
    """data.source's first train_tasks rows for training, data.val_source's first val_tasks for validation (no
    split); a task in both is an error naming it."""
    data = config.data
    train_rows = load_dataset(data.source, recipe=config.recipe, count=data.train_tasks, seed=data.seed,
                              cache_dir=plan.run_dir / "data", generator=data.generator or None)
    val_rows = load_dataset(data.val_source, recipe=config.recipe, count=data.val_tasks, seed=data.seed,
                            cache_dir=plan.run_dir / "val-data")
    both = {str(row.get("id")) for row in train_rows} & {str(row.get("id")) for row in val_rows} - {"None"}
    if both:
        raise ValueError(f"tasks {sorted(both)[:3]} are in both data.source and data.val_source: a validation "
                         "task must be held out of training; remove them from one of the two")
    return train_rows, val_rows


def plan_run(config: RunConfig, store: CheckpointStore) -> RunPlan:
    """The run's name and folders; resumes from the run's last checkpoint in the store when it has one."""
    name = run_name(config, prefix=config.recipe_label().replace("_", "-"))
    plan = fresh_plan(config, name, resolve_model(config.engine.model))
    found = find_resume_point(store, name, plan.run_dir / "resume")
    if found is None:
        return plan
    checkpoint, state = found
    print(f"resuming run {name} from iteration {state.iteration} (policy version {state.policy_version})")
    return resumed_plan(plan, checkpoint, state)


def run_iterations(config: RunConfig, plan: RunPlan, processes: RunProcesses, backend: Backend, tracker: Tracker,
                   store: CheckpointStore, train_rows: list[dict], val_rows: list[dict],
                   summary: dict[str, Any]) -> None:
    """The iterations of the loop (see the module docstring)."""
    assert processes.admin is not None and processes.engine is not None
    r = config.rollout
    state = plan.state
    mix = task_mix(config, train_rows)  # the same level composition every iteration (rollouts/task_mix.py)
    feed = RolloutFeed(processes.admin, feed_config(config, plan, mix),
                       task_stream(train_rows, state.next_task, reopen=state.open_tasks, mix=mix),
                       next_task=state.next_task)
    decode, hooks = token_decoder(plan.base_model), hooks_of(config)
    total = config.algorithm.iterations
    progress = create_progress_artifact(100.0 * plan.state.iteration / total, description=f"{plan.name}: iterations")
    if plan.state.iteration == 0 and config.algorithm.val_every and val_rows:  # the baseline, before any update
        tracker.log_metrics(validate_step0(config, plan, processes, tracker, val_rows, backend.policy_version), step=0)
    last_update: UpdateResult | None = None  # an update not uploaded yet
    for index in trange(plan.state.iteration, total, desc=f"train {plan.name}", unit="it"):
        iteration, version, started_s = index + 1, backend.policy_version, time.perf_counter()
        groups, rollout_s, sampling = draw_batch(config, feed, version, f"iteration {iteration}",
                                                 iterations_left=total - index)
        processes.check_alive()
        prepared, split = build_batch(groups, version, r.max_version_lag, config.algorithm.advantage,
                                      config.algorithm.samples, r.pass_threshold, decode,
                                      shaping(config, hooks))
        metrics = {**prepared.metrics, **split.as_metrics(), **sampling, "time/rollout_s": rollout_s,
                   "train/policy_version": float(version), "train/iteration": float(iteration),
                   **hooks.rollout_metrics(groups, r.pass_threshold, "rollout"),
                   **infra_metrics(*feed.take_finished())}  # every rollout finished since the last iteration
        if prepared.no_signal:
            print(no_signal_message(iteration, groups, split, hooks.no_signal_hint, config.engine.model,
                                    r.max_version_lag))
            summary["no_signal_iterations"] += 1
        else:
            update = update_policy(processes.admin, processes.engine, backend, prepared, plan.checkpoint_root,
                                   config.gateway.model_name, r.drain_timeout_s, config.checkpoints.keep_local)
            summary["updates"] += 1
            metrics.update({**update.metrics, **update.timing_metrics()})
            last_update = update
            if upload_due(config, summary["updates"], iteration):
                upload(plan, store, tracker, feed, update, iteration, summary)
                last_update = None
        metrics.update({**throughput_metrics(groups, time.perf_counter() - started_s),
                        **rollout_phase_metrics(groups)})
        if validation_due(config, iteration):
            metrics.update(validate(config, plan, processes, tracker, val_rows, iteration, backend.policy_version))
        tracker.log_metrics(metrics, step=iteration)
        if config.tracking.trajectories_per_step:
            log_trajectories(tracker, trajectory_items(groups, config.tracking.trajectories_per_step, iteration),
                             iteration)
        if config.tracking.traces.train_per_iteration:
            log_rollout_traces(tracker, processes.admin, groups, config.recipe_label(), iteration,
                               only=train_selection(groups, config.tracking.traces.train_per_iteration, iteration))
        summary.update(iterations=iteration, last_metrics=metrics)
        update_progress_artifact(progress, 100.0 * iteration / total)
    if last_update is not None:  # iterations after the last upload trained nothing: the model is unchanged since
        upload(plan, store, tracker, feed, last_update, summary["iterations"], summary)


def draw_batch(config: RunConfig, feed: RolloutFeed, version: int, label: str, *,
               iterations_left: int) -> tuple[list[FinishedGroup], float, dict[str, float]]:
    """The iteration's complete groups, the wait in s and dynamic-sampling metrics: `rollout.batch_groups` groups, or
    with `algorithm.dynamic_sampling` as many draws as it takes (up to max_draws) to hold that many with signal.
    `iterations_left` (this one included) caps what is kept in flight at what the run still takes."""
    r, waited_s = config.rollout, [0.0]

    def draw(groups: int) -> list[FinishedGroup]:
        still_needed = groups + (iterations_left - 1) * r.batch_groups - feed.ready
        fill_in_flight(feed, in_flight_target(config, still_needed), version)
        got, wait_s = collect_groups(feed, groups, r.wait_timeout_s, label)
        waited_s[0] += wait_s
        return got

    sampling = config.algorithm.dynamic_sampling
    if not sampling.enabled:
        return draw(r.batch_groups), waited_s[0], {}
    shares = shaping(config, hooks_of(config))  # the step's shaping term
    found = collect_with_signal(
        draw, lambda g: group_has_signal(g, config.algorithm.advantage, version, r.max_version_lag, shares),
        r.batch_groups, sampling)
    return found.groups, waited_s[0], found.metrics


def upload(plan: RunPlan, store: CheckpointStore, tracker: Tracker, feed: RolloutFeed, update: UpdateResult,
           iteration: int, summary: dict[str, Any]) -> None:
    """Publishes the update's checkpoint with the loop's position (what a resume starts from) and tags the run."""
    state = LoopState(run_name=plan.name, iteration=iteration, next_task=feed.next_task, open_tasks=feed.open_tasks,
                      policy_version=update.policy_version, tracking_run_id=tracker.run_id)
    summary["checkpoint_uri"] = publish_checkpoint(store, update.checkpoint, plan.name, state)
    tracker.set_tags({"checkpoint_uri": summary["checkpoint_uri"]})


def validate_step0(config: RunConfig, plan: RunPlan, processes: RunProcesses, tracker: Tracker, val_rows: list[dict],
                   policy_version: int) -> dict[str, float]:
    """Step 0's validation, or with `algorithm.step0_file` the one an earlier run with the same weights and validation
    recorded there (flows/baseline.py), tagged `step0_from`."""
    if config.algorithm.step0_file is None:
        return validate(config, plan, processes, tracker, val_rows, 0, policy_version)
    path = config.resolve(config.algorithm.step0_file)
    fingerprint = validation_fingerprint(config, val_rows, plan.start_model, policy_version)
    shared = read_baseline(path, fingerprint)
    if shared is not None:
        print(f"step 0: the validation run {shared.run} recorded in {path} (the same weights and validation)")
        tracker.set_tags({"step0_from": shared.run})
        return shared.metrics
    metrics = validate(config, plan, processes, tracker, val_rows, 0, policy_version)
    record_baseline(path, fingerprint, plan.name, metrics)
    tracker.set_tags({"step0_from": plan.name})
    return metrics


def validate(config: RunConfig, plan: RunPlan, processes: RunProcesses, tracker: Tracker, val_rows: list[dict],
             iteration: int, policy_version: int) -> dict[str, float]:
    """The held-out tasks in val mode under the current policy: val/ metrics (with the recipe's own, e.g. an
    action-format rate on the same tasks every time) and the rollouts as traces."""
    r, hooks = config.rollout, hooks_of(config)
    metrics, groups = run_validation(processes.admin, val_rows, f"{plan.name}-val{iteration}", r.val_group_size,
                                     policy_version, r.wait_timeout_s, r.pass_threshold, r.max_attempts,
                                     r.task_overrides or None, fetch_calls=hooks.metrics_read_calls,
                                     sampling_seed=r.val_seed,
                                     failure_reward=config.algorithm.advantage.reported_failure_reward)
    if config.tracking.traces.validation == "all":
        log_rollout_traces(tracker, processes.admin, groups, config.recipe_label(), iteration)
    return {**metrics, **hooks.rollout_metrics(groups, r.pass_threshold, "val")}


def hooks_of(config: RunConfig) -> RecipeHooks:
    """The run's recipe's hooks (defaults where it defines none)."""
    return recipe_hooks(get_recipe(config.recipe))


def shaping(config: RunConfig, hooks: RecipeHooks) -> Callable[[Sequence[FinishedGroup]], Mapping[str, float]] | None:
    """The recipe's shaping shares when the run weighs them (algorithm.advantage.format_reward > 0), else None."""
    return hooks.shaping_shares if config.algorithm.advantage.format_reward else None
