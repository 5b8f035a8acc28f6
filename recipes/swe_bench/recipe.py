"""The `swe_bench` recipe: official SWE-bench instances in their own images, under the Kubernetes runner only.

Rollout input (what the harness sees; the agent's commands run in another container and see none of it):
{id, problem_statement, image, base_commit, store}. The instance's hidden fields (fix and test patches,
FAIL_TO_PASS / PASS_TO_PASS) stay in `<store>/instances.jsonl` on the controller's machine, written by
`write_store` (the evaluation flow does it before submitting rollouts); the grader reads them there.
Harness: mini-swe-agent in the `sandbox` container (`recipes.swe_bench.harness`). Grader: the agent's `model.patch`
(its `git diff` taken in the sandbox, returned with the working directory) graded in a fresh grading Job of the
instance image (`kube_grading`, `eval_script`): reward 1.0 iff resolved by SWE-bench's rule. An empty patch is not
run (0.0, as in SWE-bench); a model patch that does not apply is 0.0 with its `patch_error`; a test patch that does
not apply raises GradingInfraError (the instance's or the grading's fault, so the rollout fails as infra). Grading
Jobs use the `kubernetes` section of the controller config named by $HARNESSRL_SWE_BENCH_CONTROLLER_CONFIG (the
agent Jobs' namespace and cluster), else the default settings.
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from controller.config import KubernetesSettings, load_controller_config
from controller.recipe import Grade, GradeInput
from recipes.swe.environments import instance_image
from recipes.swe.generator import INSTANCES_FILE, load_instances
from recipes.swe.grader import MAX_MODEL_PATCH_CHARS
from recipes.swe_bench.eval_script import read_log
from recipes.swe_bench.grading_job import GradingInputTooLarge, grading_name
from recipes.swe_bench.harness import PATCH_ERROR_FILE, PATCH_FILE
from recipes.swe_bench.kube_grading import GradingInfraError, KubeGrader
from rollouts.expectations import Rule, required_field
from rollouts.task_options import SamplingFields
from sandbox.hostile_tree import TreeRefused, read_file

NAME = "swe_bench"
MAX_HARNESS_FILE_BYTES = 16 << 20  # model.patch (or its error file) read at most this long
CONFIG_ENV = "HARNESSRL_SWE_BENCH_CONTROLLER_CONFIG"


def write_store(instances: Iterable[Mapping[str, Any]], store: Path) -> Path:
    """Write normalised instances (with their hidden fields) as `<store>/instances.jsonl`; returns the file."""
    store.mkdir(parents=True, exist_ok=True)
    path = store / INSTANCES_FILE
    path.write_text("".join(json.dumps(dict(instance), sort_keys=True) + "\n" for instance in instances))
    return path


def load_store(store: Path) -> dict[str, dict[str, Any]]:
    """instance_id -> normalised instance, from `<store>/instances.jsonl`."""
    path = Path(store) / INSTANCES_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no {path}: the swe_bench store is written by the evaluation flow "
                                "(recipes.swe_bench.recipe.write_store) on the controller's machine")
    return {row["instance_id"]: row for row in load_instances(Path(store))}


def rollout_input(instance: Mapping[str, Any], store: Path) -> dict[str, Any]:
    """What a rollout carries: nothing of the fix or the tests."""
    image = instance_image(instance)
    if image is None:
        raise ValueError(f"instance {instance['instance_id']!r} has no container image; the swe_bench recipe runs "
                         "SWE-bench images only (generated instances use the swe recipe)")
    return {"id": instance["instance_id"], "problem_statement": instance["problem_statement"], "image": image,
            "base_commit": instance.get("base_commit"), "store": str(Path(store).resolve())}


def grading_settings() -> KubernetesSettings:
    """The grading Jobs' settings: the controller config named by $HARNESSRL_SWE_BENCH_CONTROLLER_CONFIG."""
    path = os.environ.get(CONFIG_ENV)
    return load_controller_config(path).kubernetes if path else KubernetesSettings()


class SweBenchTaskFields(SamplingFields):
    """The task fields the SWE-bench harness reads besides the instance."""

    step_limit: int | None = Field(default=None, ge=1, description="Agent steps (model calls) per attempt.")
    command_timeout_s: float | None = Field(default=None, gt=0, description="Limit of one shell command.")
    sandbox_ready_timeout_s: float | None = Field(default=None, gt=0, description="Longest wait for the instance's "
                                                  "sandbox to answer.")


@dataclass(frozen=True)
class SweBenchRecipe:
    """SWE-bench instances in their official images, graded by SWE-bench's rule in a fresh grading Job."""

    name: str = NAME
    task_fields: ClassVar[type[BaseModel]] = SweBenchTaskFields  # what rollout.task_overrides may set
    store: Path = field(default_factory=lambda: Path(os.environ.get("HARNESSRL_SWE_BENCH_STORE", "swe-bench-store")))
    grade_timeout_s: float = 1800.0  # deadline of one grading Job
    grader: Any = None  # a KubeGrader (tests pass a fake); None: one from `grading_settings()` on first use

    def generate(self, count: int, seed: int) -> list[dict[str, Any]]:
        """`count` instances of the store, drawn reproducibly from `seed`, as rollout inputs."""
        instances = sorted(load_store(self.store).values(), key=lambda row: row["instance_id"])
        if len(instances) < count:
            raise ValueError(f"the swe_bench store {self.store} holds {len(instances)} instances, fewer than {count}")
        return [rollout_input(row, self.store) for row in random.Random(seed).sample(instances, count)]

    def harness_command(self) -> list[str]:
        """mini-swe-agent in the sandbox container."""
        return [sys.executable, "-m", "recipes.swe_bench.harness"]

    def prepare_workdir(self, task: dict[str, Any], workdir: Path) -> None:
        """Nothing to lay out: the repository is in the instance image, at /testbed."""

    def task_rules(self) -> list[Rule]:
        """The data suite's hook: the rollout input of `rollout_input` (the hidden fields stay in the store)."""
        return [*required_field("problem_statement", "text"), *required_field("image", "text"),
                *required_field("store", "text"),
                Rule("base_commit_non_empty", "base_commit", "text", "base_commit is a non-empty string")]

    def grade(self, graded: GradeInput) -> Grade:
        """Reward 1.0 iff the agent's diff resolves the instance in a fresh pod of its image."""
        instance = load_store(Path(graded.task["store"]))[graded.task["id"]]
        base = {"instance_id": instance["instance_id"], "exit_code": graded.exit_code}
        try:
            patch = _read_text(graded.workdir, PATCH_FILE)
        except TreeRefused as refused:
            tamper = {"tamper": True, "tamper_reasons": [refused.problem.reason]} \
                if refused.problem.kind == "tamper" else {"error": refused.problem.reason}
            return Grade(0.0, {**base, "resolved": False, "model_patch": "", **tamper})
        except FileNotFoundError:
            try:
                why = _read_text(graded.workdir, PATCH_ERROR_FILE)[-2000:]
            except FileNotFoundError:
                why = "the harness wrote no model.patch"
            return Grade(0.0, {**base, "resolved": False, "model_patch": "", "error": why})
        details = {**base, "patch_chars": len(patch),
                   "model_patch": patch if len(patch) <= MAX_MODEL_PATCH_CHARS else None}
        if not patch.strip():
            return Grade(0.0, {**details, "resolved": False, "model_patch": ""})
        try:
            run = self._grader().run(instance, patch, graded.task["image"],
                                     grading_name(instance["instance_id"], graded.workdir.name), self.grade_timeout_s)
        except GradingInputTooLarge as error:
            return Grade(0.0, {**details, "resolved": False, "error": str(error)})
        verdict = read_log(instance, run.log)
        if not verdict.test_patch_applied:
            raise GradingInfraError(f"the test patch of instance {instance['instance_id']!r} does not apply in image "
                                    f"{graded.task['image']} (not the model's patch); check the instance's test_patch "
                                    f"and base_commit against its image. The grading log's tail:\n{run.log[-2000:]}")
        details |= {"resolved": verdict.resolved, **verdict.broken, "grading_job": run.ending}
        if not verdict.parsed:
            details["error" if verdict.model_patch_applied else "patch_error"] = (
                f"no test results in the grading log (Job {run.ending}); its tail:\n{run.log[-2000:]}")
        return Grade(1.0 if verdict.resolved else 0.0, details)

    def _grader(self) -> Any:
        if self.grader is not None:
            return self.grader
        object.__setattr__(self, "grader", KubeGrader(grading_settings()))
        return self.grader


def _read_text(workdir: Path, name: str) -> str:
    """A file the harness wrote, read without following links and within MAX_HARNESS_FILE_BYTES (TreeRefused, the
    agent's failure, otherwise)."""
    return read_file(workdir, name, MAX_HARNESS_FILE_BYTES).decode("utf-8", "replace")


RECIPE = SweBenchRecipe()
