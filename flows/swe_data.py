"""Flow `prepare-swe-data`: SWE-smith or SWE-bench rows → cleaned, difficulty-filtered, versioned training splits.

load raw rows (hub id, local parquet/JSONL/JSON, or "generated": the SWE store) → the dataset's great-expectations
suite (report to MLflow and a Prefect artifact; blocking failures stop here, empty problem statements are warnings)
→ normalise → drop empty problem statements → drop instances whose environment is missing (the environment backend:
the generated store locally; for Kubernetes the registry's images, and for SWE-smith also each instance's branch
in its mirror repository) → drop instances with more than `max_tests` tests
→ probes: the policy (a model or a checkpoint) attempts every remaining task k times in val mode through the real loop
(engine, gateway, controller, RolloutFeed) → select (drop k/k solved, keep mixed, add unsolved; held-out split
first) → train/val JSONL + manifest, named by their content hash, in the object store → counts to MLflow + Prefect.

Probes run where the SWE recipe runs: the local sandbox, on instances of the generated store. Probing instances that
need a registry image is refused with the reason before any row is loaded (the Kubernetes runner has no per-instance
images yet).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from prefect import flow

from flows.config import RunConfig, load_run_config
from flows.prefect_tasks.swe_data import (
    ProbeResult,
    clean_empty_statements,
    clean_missing_environment,
    clean_too_many_tests,
    load_swe_rows,
    probe_difficulty,
    publish_summary,
    select_splits,
    validate_swe_data,
    write_versioned_splits,
)
from flows.run_processes import RunProcesses
from flows.setup import RunPlan, fresh_plan, process_settings, run_folder, run_name, splits_store
from flows.weights import Weights, resolve_weights
from recipes.swe.cleaning import DEFAULT_MAX_TESTS, StepResult, step_counts
from recipes.swe.difficulty import DifficultySplit
from recipes.swe.environments import (
    DOCKER_HUB_URL,
    GITHUB_REMOTE_TEMPLATE,
    AllOf,
    EnvironmentBackend,
    GitBranchEnvironment,
    LocalStoreEnvironment,
    RegistryImageEnvironment,
)
from recipes.swe.evaluation import rollout_tasks
from recipes.swe.instances import Source, normalize_rows
from recipes.swe.recipe import SweRecipe
from recipes.swe.splits import SplitManifest
from rollouts.expectations import require_valid
from tracking.mlflow_tracker import MlflowTracker, ui_command

DEFAULT_PROFILE = "swe-data-local"
DEFAULT_SPLITS_STORE = "file://data/splits"


@dataclasses.dataclass(frozen=True)
class DataParams:
    """What the flow prepares (its parameters)."""

    source: str  # "generated", a local parquet/JSONL/JSON path, a hub id[:split], or "hub" (the kind's dataset)
    kind: Source  # "swe-smith" or "swe-bench-verified"
    split: str | None  # the hub split (None: the kind's default)
    limit: int | None  # rows loaded (None: all)
    n_mixed: int  # mixed tasks kept for training
    n_unsolved: int  # never-solved tasks added to training
    n_heldout: int  # held-out validation tasks, drawn first
    k: int  # probe rollouts per task
    seed: int  # seed of every draw
    pass_threshold: float  # a probe solves its task when its reward is at least this
    max_tests: int  # drop tasks with more FAIL_TO_PASS + PASS_TO_PASS tests
    environment: str  # "local" (the generated store) or "registry" (images for Kubernetes)
    registry_url: str  # the registry the cluster pulls from (environment "registry")
    store: Path  # the generated SWE store
    splits_store: str  # file://DIR (relative: project root) or s3://BUCKET/PREFIX
    git_remote_template: str = GITHUB_REMOTE_TEMPLATE  # SWE-smith mirror repositories ("{repo}"; environment registry)


@flow(name="prepare-swe-data", log_prints=True)
def prepare_swe_data(source: str = "generated", kind: Source = "swe-smith", split: str | None = None,
                     limit: int | None = None, n_mixed: int = 5000, n_unsolved: int = 1000, n_heldout: int = 400,
                     k: int = 4, seed: int = 0, model: str | None = None, checkpoint_uri: str | None = None,
                     pass_threshold: float = 1.0, max_tests: int = DEFAULT_MAX_TESTS, environment: str = "local",
                     registry_url: str = DOCKER_HUB_URL, store: str | None = None,
                     splits_store: str = DEFAULT_SPLITS_STORE, profile: str = DEFAULT_PROFILE,
                     overrides: dict[str, Any] | None = None,
                     git_remote_template: str = GITHUB_REMOTE_TEMPLATE) -> dict[str, Any]:
    """Prepares versioned SWE training splits (see the module docstring); the policy probing the tasks is
    `checkpoint_uri`, else `model`, else the profile's engine.model. Returns the splits' URI, version and counts."""
    if model and checkpoint_uri:
        raise ValueError("prepare-swe-data probes with one policy: pass model or checkpoint_uri, not both")
    require_probe_environment(environment, "the tasks")  # before any row is loaded or any registry is asked
    config = load_run_config(profile, overrides, recipe="swe")
    params = DataParams(source, kind, split, limit, n_mixed, n_unsolved, n_heldout, k, seed, pass_threshold,
                        max_tests, environment, registry_url, Path(store) if store else SweRecipe().store,
                        splits_store, git_remote_template)
    return prepare(config, params, checkpoint_uri, model or (None if checkpoint_uri else config.engine.model))


def prepare(config: RunConfig, params: DataParams, checkpoint_uri: str | None, model: str | None) -> dict[str, Any]:
    """The pipeline; returns the summary."""
    name = run_name(config, prefix="swe-data")
    weights = resolve_weights(config, checkpoint_uri, model, run_folder(config, name))
    plan = fresh_plan(config, name, weights.path, weights.policy_version)
    tracker = MlflowTracker(config.tracking_uri(), config.tracking.experiment, name,
                            tags={"pipeline": "prepare-swe-data", "source": params.source, "kind": params.kind,
                                  "model": weights.label, "checkpoint_uri": weights.checkpoint_uri or "none"})
    tracker.log_params({**config.model_dump(mode="json"), "data": _jsonable(params)})
    try:
        summary = run_pipeline(config, params, weights, plan, tracker)
    except BaseException:
        tracker.end("FAILED")
        raise
    tracker.end("FINISHED")
    print(f"splits {summary['version']}: {summary['n_train']} train, {summary['n_val']} val -> {summary['splits_uri']}")
    print(f"MLflow: {ui_command(config.tracking_uri())}")
    return summary


def run_pipeline(config: RunConfig, params: DataParams, weights: Weights, plan: RunPlan,
                 tracker: MlflowTracker) -> dict[str, Any]:
    """load → validate → normalise → clean → probe → select → write; everything counted in `tracker`."""
    raw = load_swe_rows(params.source, params.kind, plan.run_dir / "data", params.split, params.limit, params.store)
    report = validate_swe_data(raw, params.kind)
    tracker.log_text(report.to_markdown(), "data/validation.md")
    tracker.log_dict(report.model_dump(mode="json"), "data/validation.json")
    require_valid(report)  # blocking rules stop the flow with the report; warnings are cleaned below
    steps = clean(normalize_rows(raw, params.kind), params)
    candidates = steps[-1].kept
    tracker.log_dict({s.name: [list(d) for d in s.dropped] for s in steps}, "data/dropped.json")
    if not candidates:
        raise ValueError(f"no instance of {params.source} survived cleaning ({step_counts(steps)}); see "
                         "data/dropped.json in the MLflow run for each reason")
    probe = run_probes(config, params, plan, candidates)
    tracker.log_dict({"k": params.k, "outcomes": probe.outcomes, "unfinished": probe.unfinished},
                     "data/probe_outcomes.json")
    levels = {row["instance_id"]: row["level"] for row in candidates if row.get("level") is not None}
    selected = select_splits(probe.outcomes, params.k, params.n_mixed, params.n_unsolved, params.n_heldout,
                             params.seed, params.pass_threshold, levels or None)
    by_id = {row["instance_id"]: row for row in candidates}
    fields = manifest_fields(params, steps, probe, selected, weights, config.rollout.task_overrides)
    uri, manifest = write_versioned_splits(plan.run_dir / "splits", splits_store(config, params.splits_store),
                                           [by_id[i] for i in selected.train], [by_id[i] for i in selected.val],
                                           fields)
    counts = {"rows_loaded": len(raw), **{f"{step}/{key}": value for step, c in fields["steps"].items()
                                          for key, value in c.items()},
              **{f"difficulty/{key}": value for key, value in selected.counts.as_dict().items()}, **probe.stats}
    tracker.log_metrics({key.replace(":", "_"): float(value) for key, value in counts.items()}, step=0)
    tracker.log_dict(manifest.model_dump(mode="json"), "data/manifest.json")
    tracker.set_tags({"splits_uri": uri, "splits_version": manifest.version})
    publish_summary(summary_markdown(params, manifest, uri))
    return {"splits_uri": uri, "version": manifest.version, "n_train": manifest.n_train, "n_val": manifest.n_val,
            "counts": counts, "mlflow_run_id": tracker.run_id, "run_name": plan.name}


def clean(rows: list[dict[str, Any]], params: DataParams) -> list[StepResult]:
    """The cleaning steps in order, each on the previous one's kept rows."""
    first = clean_empty_statements(rows)
    backend = environment_backend(params)
    try:
        second = clean_missing_environment(first.kept, backend)
    finally:
        close = getattr(backend, "close", None)  # the registry's HTTP connections
        if close is not None:
            close()
    return [first, second, clean_too_many_tests(second.kept, params.max_tests)]


def environment_backend(params: DataParams) -> EnvironmentBackend:
    """The configured backend (`choose_environment`), with registry credentials from $HARNESSRL_REGISTRY_*."""
    return choose_environment(params.environment, params.kind, params.store, params.registry_url,
                              params.git_remote_template, os.environ.get("HARNESSRL_REGISTRY_USERNAME"),
                              os.environ.get("HARNESSRL_REGISTRY_PASSWORD"))


def choose_environment(environment: str, kind: Source, store: Path, registry_url: str, git_remote_template: str,
                       username: str | None = None, password: str | None = None) -> EnvironmentBackend:
    """"local": the generated store. "registry": the image in the registry the cluster pulls from; SWE-smith
    instances also need their branch in their mirror repository (SWE-bench's base commit is inside its image)."""
    if environment == "local":
        return LocalStoreEnvironment(store)
    if environment != "registry":
        raise ValueError(f"environment={environment!r}: use 'local' (the generated store) or 'registry' (images)")
    images = RegistryImageEnvironment(registry_url, username=username, password=password)
    if kind == "swe-smith":
        return AllOf(images, GitBranchEnvironment(git_remote_template))
    return images


def run_probes(config: RunConfig, params: DataParams, plan: RunPlan,
               candidates: list[dict[str, Any]]) -> ProbeResult:
    """k val-mode rollouts per candidate against services serving the plan's weights (local sandbox only)."""
    require_probe_environment(params.environment, f"{len(candidates)} candidates")
    r = config.rollout
    with RunProcesses(process_settings(config, plan)) as services:
        assert services.admin is not None
        return probe_difficulty(services.admin, rollout_tasks(candidates, params.store), params.k,
                                f"{plan.name}-probe", plan.state.policy_version, r.wait_timeout_s, r.max_attempts,
                                r.task_overrides or None)


def require_probe_environment(environment: str, what: str) -> None:
    """Probes run the SWE recipe in the local sandbox: "local" passes; "registry" and unknown environments raise
    naming the fix (`what`: the instances that would be probed, for the message)."""
    if environment not in ("local", "registry"):
        raise ValueError(f"environment={environment!r}: use 'local' (the generated store) or 'registry' (images)")
    if environment != "local":
        raise ValueError(f"environment={environment!r}: {what} need registry images, but the probes run the SWE "
                         "recipe in the local sandbox and the Kubernetes runner has no per-instance images yet; "
                         "probe generated tasks with environment='local'")


def manifest_fields(params: DataParams, steps: list[StepResult], probe: ProbeResult, selected: DifficultySplit,
                    weights: Weights, task_overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the manifest records besides the files (the version hashes all of it); `task_overrides` are the harness
    settings the probes ran with (e.g. the SWE harness's `harness_config`): a task's difficulty is its difficulty
    under them, so the split says which."""
    probed = {"in": len(steps[-1].kept), "kept": len(probe.outcomes),
              "dropped": len(probe.unfinished)}
    return {"name": params.kind, "seed": params.seed, "k": params.k,
            "sizes": {"n_mixed": params.n_mixed, "n_unsolved": params.n_unsolved, "n_heldout": params.n_heldout},
            "sources": [params.source], "steps": {**step_counts(steps), "probe_difficulty": probed},
            "difficulty": selected.counts.as_dict(),
            "params": {"model": weights.label, "checkpoint_uri": weights.checkpoint_uri,
                       "policy_version": weights.policy_version, "pass_threshold": params.pass_threshold,
                       "max_tests": params.max_tests, "environment": params.environment, "split": params.split,
                       "limit": params.limit, "probe_task_overrides": dict(task_overrides or {})}}


def summary_markdown(params: DataParams, manifest: SplitManifest, uri: str) -> str:
    """The Prefect summary artifact: where the splits are and every count."""
    lines = [f"## SWE data: {params.kind} from {params.source}", "",
             f"Splits `{manifest.name}/{manifest.version}`: {manifest.n_train} train, {manifest.n_val} val, at "
             f"`{uri}` (k={manifest.k}, seed={manifest.seed}).", "", "| step | in | kept | dropped |",
             "|---|---|---|---|"]
    lines += [f"| {step} | {c['in']} | {c['kept']} | {c['dropped']} |" for step, c in manifest.steps.items()]
    lines += ["", "| difficulty | tasks |", "|---|---|", *(f"| {key} | {value} |"
                                                           for key, value in manifest.difficulty.items())]
    return "\n".join(lines) + "\n"


def _jsonable(params: DataParams) -> dict[str, Any]:
    return {key: str(value) if isinstance(value, Path) else value for key, value in dataclasses.asdict(params).items()}
