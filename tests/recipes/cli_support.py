"""What the real-CLI tests share: the skip reason when a CLI is not installed, a generated SWE task and its rollout
input, one rollout run by the controller (LocalRunner sandbox, grading, reward), and the checks on the recorded calls
and the samples built from them."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.config import ControllerConfig
from controller.reconcile import Reconciler
from controller.runners.local import LocalRunner
from gateway.client import GatewayClient
from gateway.records import CallRecord, CallStatus, Rollout, RolloutSpec
from recipes.cli_harness.binaries import CLIS, cli_dir, missing_binary
from recipes.swe.generator import generate
from recipes.swe.recipe import rollout_input
from tests.gateway.support import ADMIN_TOKEN, GRADER_TOKEN
from tests.recipes.swe.conftest import write_tiny_project
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


def generated_task(root: Path) -> SweTask:
    """A one-instance store generated from the tiny project (the first bug that breaks a test)."""
    project = write_tiny_project(root / "src" / "tinymath")
    (instance,) = generate(str(project), root / "store", count=1, seed=0)
    return SweTask(root / "store", instance)


def task_input(task: SweTask, cli: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The rollout's input as train-swe creates it for the recipe `cli` (its name under "recipe")."""
    return rollout_input(task.instance, task.store) | overrides | {"recipe": cli}


def run_through_controller(gateway_url: str, spec: RolloutSpec, root: Path, timeout_s: float) -> Rollout:
    """The rollout `spec` run by a controller as `make train` runs it (the recipe found by the task's "recipe" name,
    the LocalRunner's sandbox, grading, the reward posted with the grader credential); its working directory kept
    under root/work. Returns the rollout once it is final."""
    config = ControllerConfig(controller_id=f"cli-{uuid.uuid4().hex[:6]}", concurrency=1, lease_s=60.0,
                              renew_every_s=10.0, poll_interval_s=0.1, harness_timeout_s=timeout_s, kill_grace_s=2.0,
                              work_dir=root / "work", logs_dir=root / "logs", keep_workdirs=True)
    with GatewayClient(gateway_url, ADMIN_TOKEN) as admin, GatewayClient(gateway_url, GRADER_TOKEN) as grader:
        admin.create_rollouts([spec])
        Reconciler(config, admin, grader, LocalRunner(1, kill_grace_s=config.kill_grace_s)).run(until_idle=True)
        return admin.get_rollout(spec.id)


def attempt_dir(root: Path, rollout_id: str) -> Path:
    """The controller's working directory of the rollout's first attempt (`controller.attempt.attempt_paths`)."""
    return (root / "work").resolve() / f"{rollout_id}.a1"


def harness_logs(root: Path, rollout_id: str) -> str:
    """The attempt's stdout and stderr, for failure messages."""
    logs = (root / "logs").resolve()
    return "\n".join(path.read_text()[-3000:] for path in sorted(logs.glob(f"{rollout_id}.a1.*")))


def summary_line(root: Path, rollout_id: str) -> dict[str, Any]:
    """The harness's one summary line (the last line of its stdout)."""
    stdout = ((root / "logs").resolve() / f"{rollout_id}.a1.stdout").read_text()
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
