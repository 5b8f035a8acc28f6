"""What the real-CLI tests share: the skip reason when a CLI is not installed, a generated SWE task laid out for a
rollout, one sandboxed attempt through the LocalRunner, and the checks on the recorded calls and the samples built
from them."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.cli_harness.binaries import CLIS, cli_dir, missing_binary
from agents.cli_harness.recipe import CliSweRecipe
from agents.swe.generator import generate
from agents.swe.recipe import SweRecipe, rollout_input
from controller.recipe import TASK_FILE
from controller.runners.base import RunResult, RunSpec
from controller.runners.local import LocalRunner
from gateway.records import CallRecord, CallStatus
from tests.agents.swe.conftest import write_tiny_project
from trainer.recorded import to_recorded_call
from trainer.samples import BuiltSamples, build_samples

CALL_KINDS = {"claude-code": "messages", "codex": "responses"}


def cli_missing(name: str) -> str | None:
    """Why the real CLI `name` cannot run here (no node, not installed), or None."""
    if shutil.which("node") is None:
        return "node is not installed (the coding CLIs need Node.js 18+ and `make harnesses`)"
    return missing_binary(CLIS[name], CLIS[name].binary(cli_dir()).resolve())


def sandbox_missing() -> str | None:
    """The local runner sandboxes harnesses as other uids: it is started as root (as in `make test`)."""
    return None if os.geteuid() == 0 else "the local runner's sandbox is started as root"


@dataclass(frozen=True)
class SweTask:
    """One generated SWE instance and the store it lives in."""

    store: Path
    instance: dict[str, Any]

    def recipe(self, name: str) -> CliSweRecipe:
        return CliSweRecipe(name, swe=SweRecipe(store=self.store, source="unused"))


def generated_task(root: Path) -> SweTask:
    """A one-instance store generated from the tiny project (the first bug that breaks a test)."""
    project = write_tiny_project(root / "src" / "tinymath")
    (instance,) = generate(str(project), root / "store", count=1, seed=0)
    return SweTask(root / "store", instance)


def prepare(task: SweTask, recipe: CliSweRecipe, workdir: Path, overrides: dict[str, Any]) -> dict[str, Any]:
    """The rollout's working directory as the controller lays it out; returns the task input."""
    task_input = rollout_input(task.instance, task.store) | overrides
    workdir.mkdir(parents=True)
    (workdir / TASK_FILE).write_text(json.dumps(task_input))
    recipe.prepare_workdir(task_input, workdir)
    return task_input


def run_sandboxed(recipe: CliSweRecipe, task_input: dict[str, Any], workdir: Path, base_url: str, api_key: str,
                  rollout_id: str, timeout_s: float) -> tuple[RunResult, str, str]:
    """One attempt in the LocalRunner's sandbox (as the controller starts it); (result, stdout, stderr)."""
    logs = workdir.parent / f"{rollout_id}.logs"
    spec = RunSpec(rollout_id=rollout_id, attempt=1, command=tuple(recipe.harness_command()), base_url=base_url,
                   api_key=api_key, task=task_input, workdir=workdir, timeout_s=timeout_s,
                   stdout_path=logs / "out", stderr_path=logs / "err")
    runner = LocalRunner(1, kill_grace_s=2.0)
    try:
        runner.start(spec)
        while not (results := runner.poll()):
            time.sleep(0.05)
    finally:
        runner.close()
    return results[0], spec.stdout_path.read_text(), spec.stderr_path.read_text()


def summary_line(stdout: str) -> dict[str, Any]:
    """The harness's one summary line."""
    return json.loads(stdout.strip().splitlines()[-1])


def check_recorded(calls: Sequence[CallRecord], kind: str) -> None:
    """Every call of the harness's protocol recorded, answered, with the engine's token IDs and logprobs."""
    assert calls, "no call was recorded"
    ours = [call for call in calls if call.kind == kind]
    assert ours, f"no {kind} call among {[call.kind for call in calls]}"
    for call in calls:
        assert call.status == CallStatus.OK, (call.seq, call.kind, call.error)
        assert call.prompt_token_ids and call.response_token_ids, (call.seq, call.kind)
        assert len(call.response_logprobs) == len(call.response_token_ids)
        assert call.policy_version is not None


def built_samples(calls: Sequence[CallRecord], group_id: str) -> BuiltSamples:
    """The trainer's samples of the recorded calls; every main call's response is trainable in one of them (side
    calls are skipped by default)."""
    built = build_samples([to_recorded_call(call, group_id) for call in calls])
    assert built.samples and built.stats.calls == len(calls)
    trainable = sum(sample.num_trainable_tokens for sample in built.samples)
    assert trainable == sum(len(call.response_token_ids) for call in calls if not call.side)
    return built
