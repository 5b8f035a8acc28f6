"""What a SWE-bench evaluation runs where, and grading given predictions of local instances with the SWE grader.

Instances (rows of the normalised schema, `recipes.swe.instances`) whose environment is in the generated store run in
the local sandbox as val-mode rollouts of the `swe` recipe. Instances that need an official SWE-bench image run as
Kubernetes Jobs of the `swe_bench` recipe (the image as a sandbox container beside the harness, graded in a fresh
grading Job of the image) when the controller's runner is "kubernetes"; elsewhere they are not runnable, each with
the reason. Nothing is dropped silently: every instance ends in the report.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipes.swe.datasets import HUB_IDS
from recipes.swe.environments import LocalStoreEnvironment, instance_image
from recipes.swe.evaluation_report import InstanceOutcome, not_runnable, outcome_from_grade
from recipes.swe.generator import INSTANCES_FILE, load_instances
from recipes.swe.grader import grade_patch
from recipes.swe.predictions import Prediction
from recipes.swe.recipe import rollout_input
from recipes.swe.splits import fetch_splits
from storage.directory_store import DirectoryStore

VERIFIED_HUB_ID = HUB_IDS["swe-bench-verified"]
RECIPE = "swe"
BENCH_RECIPE = "swe_bench"


@dataclass(frozen=True)
class EvaluationPlan:
    """The instances split by where they run."""

    local: tuple[dict[str, Any], ...]  # run in the local sandbox (the generated store holds their environment)
    not_runnable: tuple[InstanceOutcome, ...]  # no environment here, with the reason
    kubernetes: tuple[dict[str, Any], ...] = ()  # run as Kubernetes Jobs in their official image (swe_bench recipe)


def not_runnable_reason(instance: Mapping[str, Any], local_reason: str, runner: str) -> str:
    """Why `instance` cannot run here, given why the local store lacks it and the controller's runner (an instance
    with an image under the "kubernetes" runner is runnable: `plan_evaluation` sends it to the cluster)."""
    image = instance_image(instance)
    if image is None:
        return (f"its local environment is missing ({local_reason}); generate the task into the SWE store "
                "($HARNESSRL_SWE_STORE) or evaluate another source")
    return (f"needs the official SWE-bench image {image}, which runs as a Kubernetes Job: no cluster is "
            f"configured here (controller.runner is {runner!r}; a profile with controller.runner: kubernetes "
            "names one)")


def plan_evaluation(instances: Sequence[Mapping[str, Any]], store: Path, runner: str) -> EvaluationPlan:
    """Which instances run in the local sandbox, which as Kubernetes Jobs in their image (runner "kubernetes"); the
    others with their reasons (order kept)."""
    environment = LocalStoreEnvironment(store)
    available = environment.available(instances)
    local, on_cluster, skipped = [], [], []
    for instance in instances:
        instance_id = instance["instance_id"]
        if available[instance_id]:
            local.append(dict(instance))
        elif runner == "kubernetes" and instance_image(instance) is not None:
            on_cluster.append(dict(instance))
        else:
            reason = not_runnable_reason(instance, environment.last_reasons.get(instance_id, "unknown"), runner)
            skipped.append(not_runnable(instance_id, str(instance.get("repo") or "unknown"), reason))
    return EvaluationPlan(tuple(local), tuple(skipped), tuple(on_cluster))


def rollout_tasks(instances: Iterable[Mapping[str, Any]], store: Path) -> list[dict[str, Any]]:
    """The `swe` recipe's rollout inputs of local instances (no fix, no tests: only id, statement and store)."""
    return [{**rollout_input(dict(instance), store), "recipe": RECIPE} for instance in instances]


def split_rollout_tasks(store: DirectoryStore, uri: str, local_dir: Path,
                        swe_store: Path) -> tuple[list[dict], list[dict]]:
    """The train and val rollout tasks of a versioned SWE split (written by `prepare-swe-data`): each instance as the
    `swe` recipe's rollout input (no fix, no tests), its repository in the generated store `swe_store`."""
    splits = fetch_splits(store, uri, local_dir)
    print(f"SWE splits {splits.manifest.name}/{splits.manifest.version}: {len(splits.train)} train, "
          f"{len(splits.val)} val (k={splits.manifest.k}, seed={splits.manifest.seed})")
    return rollout_tasks(splits.train, swe_store), rollout_tasks(splits.val, swe_store)


def bench_rollout_tasks(instances: Iterable[Mapping[str, Any]], store: Path) -> list[dict[str, Any]]:
    """The `swe_bench` recipe's rollout inputs (id, statement, image, base commit, store; no fix, no tests)."""
    from recipes.swe_bench.recipe import rollout_input as bench_input

    return [{**bench_input(instance, store), "recipe": BENCH_RECIPE} for instance in instances]


def grade_predictions(store: Path, predictions: Iterable[Prediction], *,
                      timeout_s: float = 600.0) -> list[InstanceOutcome]:
    """Grade each prediction of a store instance as the rollouts are graded (the SWE grader's `grade_patch` on a
    fresh checkout); an empty patch is not run, as in SWE-bench."""
    stored = {instance["instance_id"]: instance for instance in load_instances(store)}
    outcomes = []
    for prediction in predictions:
        instance = stored.get(prediction.instance_id)
        if instance is None:
            raise KeyError(f"prediction for {prediction.instance_id!r}: not in {store / INSTANCES_FILE}; grade "
                           "predictions of generated instances only (SWE-bench's harness grades the others)")
        if not prediction.model_patch.strip():
            details: Mapping[str, Any] = {"model_patch": ""}
        else:
            details = grade_patch(store, instance, prediction.model_patch, timeout_s=timeout_s).details
        outcomes.append(outcome_from_grade(prediction.instance_id, instance["repo"], details))
    return outcomes
