"""Flow `evaluate-swe-verified`: a model or checkpoint on SWE-bench instances, graded with SWE-bench's resolved rule.

instances (SWE-bench Verified from the hub by default; "generated" for the local store) → where each runs
(`recipes.swe.evaluation.plan_evaluation`: the local sandbox for instances of the generated store; instances needing
an official SWE-bench image as Kubernetes Jobs of the `swe_bench` recipe when `controller.runner` is kubernetes, else
reported as not runnable here, with the reason) → the weights, only when an instance runs (a checkpoint downloaded
from the checkpoint store, a prepared model name or an HF directory, or the latest checkpoint of the train-swe runs)
→ engine, gateway and controller serving those weights → one val-mode rollout per local instance (no training; the
calls stay recorded) → outcomes from each rollout's state and reward event (the agent's diff is the grade's
`model_patch`) → predictions JSONL (SWE-bench's format, re-gradable by its harness) and the report → MLflow (experiment
of the profile, `swe-bench-verified`; run tagged with the model and checkpoint) and a Prefect markdown artifact.

Nightly (`latest_checkpoint=True`) with no train-swe checkpoint yet: the flow says so, publishes that as the report
artifact and ends without an MLflow run (evaluating the unchanged base model every night would repeat one result;
evaluate a base model on purpose with `model=...`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from flows.config import RunConfig, load_run_config
from flows.prefect_tasks.evaluation import (
    collect_outcomes,
    latest_train_checkpoint,
    load_instances,
    publish_evaluation,
    publish_no_checkpoint,
    run_rollouts,
)
from flows.prefect_tasks.tracking import log_rollout_traces
from flows.run_processes import RunProcesses
from flows.setup import fresh_plan, process_settings, run_folder, run_name
from flows.weights import Weights, resolve_weights
from recipes.swe.evaluation import (
    VERIFIED_HUB_ID,
    EvaluationPlan,
    bench_rollout_tasks,
    plan_evaluation,
    rollout_tasks,
)
from recipes.swe.evaluation_report import (
    EvaluationReport,
    InstanceOutcome,
    OutcomeStatus,
    build_report,
    no_verdict,
    predictions_of,
)
from recipes.swe.instances import Source
from recipes.swe.predictions import model_label
from recipes.swe.recipe import SweRecipe
from recipes.swe_bench.recipe import write_store
from rollouts.task_data import GENERATED
from tracking.mlflow_tracker import MlflowTracker, ui_command
from tracking.traces import FeedbackDraft
from trainer.rollout_groups import FinishedGroup

DEFAULT_PROFILE = "swe-eval-local"
BENCH_STORE_DIR = "swe-bench-store"  # under the run directory: the swe_bench instances the grader reads
EVALUATION_TAG = "swe-bench-verified"  # the `evaluation` tag of the runs (train runs carry `recipe` instead)


@flow(name="evaluate-swe-verified", log_prints=True)
def evaluate_swe_verified(checkpoint_uri: str | None = None, model: str | None = None,
                          latest_checkpoint: bool = False, source: str = VERIFIED_HUB_ID,
                          kind: Source | None = None, split: str | None = None, limit: int | None = None,
                          profile: str = DEFAULT_PROFILE, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Evaluates a checkpoint (`checkpoint_uri`, file:// or s3://), a model (`model`), or the latest train-swe
    checkpoint (`latest_checkpoint`) on SWE-bench instances; returns the summary (report, files, MLflow run)."""
    config = load_run_config(profile, overrides, recipe="swe")
    check_target(checkpoint_uri, model, latest_checkpoint)
    train_run = None
    if latest_checkpoint:
        train_run = latest_train_checkpoint(config.tracking_uri())
        if train_run is None:
            message = (f"no train-swe run with a checkpoint_uri tag in MLflow at {config.tracking_uri()}; nothing "
                       "to evaluate tonight. Train first (`make train`, or the train-swe deployments), or evaluate "
                       "a model with the manual deployment.")
            print(message)
            publish_no_checkpoint(message)
            return {"skipped": message, "mlflow_run_id": None}
        checkpoint_uri = train_run.checkpoint_uri
        print(f"latest train-swe checkpoint: {checkpoint_uri} (MLflow run {train_run.run_name or train_run.run_id})")
    tags = {"train_run_id": train_run.run_id} if train_run is not None else {}
    return evaluate(config, checkpoint_uri, model, source, kind or kind_of(source), split, limit, tags)


def check_target(checkpoint_uri: str | None, model: str | None, latest_checkpoint: bool) -> None:
    """Exactly one of a checkpoint, a model or the latest checkpoint; raises naming the parameters otherwise."""
    given = [name for name, value in (("checkpoint_uri", checkpoint_uri), ("model", model),
                                      ("latest_checkpoint", latest_checkpoint)) if value]
    if len(given) != 1:
        raise ValueError(f"evaluate-swe-verified needs exactly one of checkpoint_uri (file:// or s3:// from the "
                         f"checkpoint store), model (a prepared name or an HF directory) or latest_checkpoint=true; "
                         f"got {given or 'none'}")


def kind_of(source: str) -> Source:
    """The dataset kind of a source: SWE-smith rows for "generated" and SWE-smith ids/paths, else SWE-bench."""
    return "swe-smith" if source == GENERATED or "smith" in source.lower() else "swe-bench-verified"


def evaluate(config: RunConfig, checkpoint_uri: str | None, model: str | None, source: str, kind: Source,
             split: str | None, limit: int | None, extra_tags: dict[str, str] | None = None) -> dict[str, Any]:
    """The evaluation (see the module docstring); returns the summary."""
    name = run_name(config, prefix="swe-eval")
    run_dir = run_folder(config, name)
    store = SweRecipe().store
    instances = load_instances(source, kind, run_dir / "data", split, limit, store)
    plan = plan_evaluation(instances, store, config.controller.runner)
    print(f"{len(instances)} instances of {source}: {len(plan.local)} run in the local sandbox, "
          f"{len(plan.kubernetes)} as Kubernetes Jobs in their SWE-bench image, {len(plan.not_runnable)} not "
          "runnable here")
    runnable = bool(plan.local or plan.kubernetes)  # else no weights are fetched: nothing would serve them
    weights = resolve_weights(config, checkpoint_uri, model, run_dir) if runnable else None
    label = model_label(model=model, checkpoint_uri=checkpoint_uri)  # weights.label, known without the download
    tags = {"evaluation": EVALUATION_TAG, "model": label, "checkpoint_uri": checkpoint_uri or "none",
            "source": source, **(extra_tags or {})}
    tracker = MlflowTracker(config.tracking_uri(), config.tracking.experiment, name, tags=tags)
    tracker.log_params({**config.model_dump(mode="json"), "eval": {"source": source, "kind": kind, "split": split,
                                                                   "limit": limit}})
    try:
        outcomes = run_local(config, plan, weights, name, tracker) if weights is not None else []
        outcomes = ordered([*outcomes, *plan.not_runnable], instances)
        report = build_report(outcomes, model=label, source=source, checkpoint_uri=checkpoint_uri)
        files = publish_evaluation(tracker, report, predictions_of(outcomes, label), run_dir / "evaluation")
    except BaseException:
        tracker.end("FAILED")
        raise
    tracker.end("FINISHED")
    print_summary(report, files, config.tracking_uri())
    return {"run_name": name, "mlflow_run_id": tracker.run_id, "report": report.model_dump(mode="json"),
            **{key: str(path) for key, path in files.items()}}


def run_local(config: RunConfig, plan: EvaluationPlan, weights: Weights, name: str,
              tracker: MlflowTracker | None = None) -> list[InstanceOutcome]:
    """One val-mode rollout per local instance (and per Kubernetes one: `swe_bench` recipe, its hidden fields in
    the run's swe_bench store) against services serving `weights`; an outcome per instance, each rollout logged as
    a trace of `tracker`'s run (when given) with its resolution as feedback."""
    run_plan = fresh_plan(config, name, weights.path, weights.policy_version)
    settings = process_settings(config, run_plan, pin_recipe=False)  # each task names swe or swe_bench
    tasks = rollout_tasks(plan.local, SweRecipe().store)
    if plan.kubernetes:
        bench_store = run_plan.run_dir / BENCH_STORE_DIR
        write_store(plan.kubernetes, bench_store)
        tasks += bench_rollout_tasks(plan.kubernetes, bench_store)
    repos = {instance["instance_id"]: instance["repo"] for instance in (*plan.local, *plan.kubernetes)}
    r = config.rollout
    with RunProcesses(settings) as services:
        assert services.admin is not None
        groups, unfinished = run_rollouts(services.admin, tasks, f"{name}-eval", weights.policy_version,
                                          r.wait_timeout_s, r.max_attempts, r.task_overrides or None)
        outcomes = collect_outcomes(services.admin, groups, repos)
        if tracker is not None:
            log_rollout_traces(tracker, services.admin, groups, "swe", None, **resolution_feedback(groups, outcomes))
    reason = f"no verdict within rollout.wait_timeout_s={r.wait_timeout_s:g} s"
    return outcomes + [no_verdict(instance_id, repos[instance_id], reason) for instance_id in unfinished]


def resolution_feedback(groups: list[FinishedGroup], outcomes: list[InstanceOutcome]) -> dict[str, Any]:
    """Per rollout (groups of one, in `collect_outcomes`' order): the `resolved` feedback (its status and reason) and
    the instance's tag, as `log_rollout_traces`' extra_feedback and extra_tags."""
    rollouts = [rollout for group in groups for rollout in group.rollouts]
    feedback = {rollout.id: [FeedbackDraft("resolved", outcome.status == OutcomeStatus.RESOLVED,
                                           rationale=outcome.reason or str(outcome.status),
                                           metadata={"status": str(outcome.status)})]
                for rollout, outcome in zip(rollouts, outcomes, strict=True)}
    tags = {rollout.id: {"harnessrl.instance_id": outcome.instance_id, "harnessrl.resolution": str(outcome.status)}
            for rollout, outcome in zip(rollouts, outcomes, strict=True)}
    return {"extra_feedback": feedback, "extra_tags": tags}


def ordered(outcomes: list[InstanceOutcome], instances: list[dict[str, Any]]) -> list[InstanceOutcome]:
    """Outcomes in the instances' order."""
    position = {instance["instance_id"]: index for index, instance in enumerate(instances)}
    return sorted(outcomes, key=lambda outcome: position.get(outcome.instance_id, len(position)))


def print_summary(report: EvaluationReport, files: dict[str, Path], tracking_uri: str) -> None:
    """The closing lines: the resolved rate, the categories, where the files and the run are."""
    print(f"resolved {report.resolved}/{report.submitted} run here ({report.resolved_rate:.1%}); "
          f"{report.unresolved} unresolved, {report.empty_patches} empty patches, {report.errors} agent errors, "
          f"{report.infra_failures} infra failures, {report.not_runnable} not runnable here")
    print(f"predictions: {files['predictions']}  report: {files['report_markdown']}")
    print(f"MLflow: {ui_command(tracking_uri)}")
