"""The working directory is hostile input, end to end: a harness in the local runner's sandbox attacks its own
working directory (as an agent's shell commands could), the real controller surveys and grades it with the `swe`
grader, and every attack ends on the first attempt as reward 0 (with `tamper` where it reached out of the tree),
never a requeue, with nothing of a link's target in the reward, the events, the rollout's error or the logs."""

from __future__ import annotations

import json
import logging
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from controller.config import ControllerConfig
from controller.reconcile import Reconciler
from controller.runners.local import LocalRunner
from gateway.client import GatewayClient
from gateway.records import EventKind, FailureKind, RolloutSpec, RolloutState
from recipes.swe.generator import base_path, generate
from recipes.swe.recipe import SweRecipe, rollout_input
from sandbox.hostile_tree import TreeLimits
from tests.gateway.support import ADMIN_TOKEN
from tests.recipes.swe.conftest import write_tiny_project

pytestmark = pytest.mark.slow  # harness processes in the local runner's sandbox, the grader's sandboxes

HARNESS = Path(__file__).with_name("hostile_workdir_harness.py")
SECRET = "secret-marker-5d1e9c"
CAP_BYTES = 1 << 20


@dataclass(frozen=True)
class HostileSwe(SweRecipe):
    """The `swe` recipe with a harness that attacks its working directory (the task says how)."""

    name: str = "hostile-swe"
    tree_limits: TreeLimits = TreeLimits(max_file_bytes=CAP_BYTES)

    def harness_command(self) -> list[str]:
        return [sys.executable, str(HARNESS)]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    store = tmp_path_factory.mktemp("store")
    instances = generate(str(write_tiny_project(tmp_path_factory.mktemp("src") / "tinymath")), store, count=1,
                         seed=0)
    return store, instances[0]


@pytest.fixture(scope="module")
def secret_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("secret")
    (folder / "key.txt").write_text(SECRET)
    (folder / "tinymath.py").write_text(f"# {SECRET}\n")
    return folder


def run(gateway, grader, tmp_path: Path, store: tuple[Path, dict[str, Any]], attack: list[list[str]],
        caplog) -> tuple[Any, list[Any], str]:
    """One rollout with `attack` through the real reconcile loop: (rollout, its events, every log text)."""
    store_path, instance = store
    recipe = HostileSwe(store=store_path)
    cfg = ControllerConfig(controller_id=f"ctl-{uuid.uuid4().hex[:6]}", concurrency=1, lease_s=60.0,
                           renew_every_s=5.0, poll_interval_s=0.1, harness_timeout_s=60.0, kill_grace_s=0.5,
                           work_dir=tmp_path / "work", logs_dir=tmp_path / "logs")
    rollout_id = f"hostile-{uuid.uuid4().hex[:8]}"
    with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
        admin.create_rollouts([RolloutSpec(id=rollout_id, group_id=rollout_id, max_attempts=3, input={
            **rollout_input(instance, store_path), "recipe": recipe.name, "attack": attack})])
        with caplog.at_level(logging.DEBUG):
            Reconciler(cfg, admin, grader, LocalRunner(1, kill_grace_s=0.5), recipes=lambda _: recipe).run(
                until_idle=True)
        rollout, events = admin.get_rollout(rollout_id), admin.list_events(rollout_id)
    logs = "".join(path.read_text(errors="replace") for path in (tmp_path / "logs").glob("*"))
    return rollout, events, logs + caplog.text


def reward_details(events: list[Any]) -> dict[str, Any]:
    rewards = [e.payload for e in events if e.kind == EventKind.REWARD]
    assert len(rewards) == 1, rewards
    return rewards[0]["details"]


def assert_first_attempt_zero(rollout: Any, events: list[Any]) -> dict[str, Any]:
    assert rollout.attempt == 1, "the attempt was retried: the policy got a fresh chance"
    assert rollout.reward == 0.0 and rollout.state in (RolloutState.SUCCEEDED, RolloutState.FAILED)
    assert rollout.state == RolloutState.SUCCEEDED or rollout.failure_kind == FailureKind.AGENT
    assert not [e for e in events if e.kind == EventKind.STATE and e.payload.get("state") == "queued"]
    return reward_details(events)


def attacks(store: tuple[Path, dict[str, Any]], secret: Path) -> dict[str, list[list[str]]]:
    gold = str(base_path(store[0], store[1]))  # the store's clean copy of the repository: it holds the fix
    return {
        "repo is a link to the store's clean copy": [["rename", "repo", "mine"], ["symlink", gold, "repo"]],
        "repo is a link to a secret folder": [["rename", "repo", "mine"], ["symlink", str(secret), "repo"]],
        "repo is a link to another rollout's working directory": [
            ["rename", "repo", "mine"], ["symlink", "../other-rollout.a1/repo", "repo"]],
        "a module in repo is a link to a secret file": [["symlink", f"{secret}/tinymath.py", "repo/tinymath.py"]],
        "a folder deep in repo is a link out": [["symlink", str(secret), "repo/tests/data"]],
        "a link deep in repo climbs out relatively": [["symlink", "../../../../..", "repo/tests/up"]],
    }


@pytest.mark.parametrize("name", [
    "repo is a link to the store's clean copy", "repo is a link to a secret folder",
    "repo is a link to another rollout's working directory", "a module in repo is a link to a secret file",
    "a folder deep in repo is a link out", "a link deep in repo climbs out relatively"])
def test_links_out_of_the_working_directory_are_tampering_and_nothing_outside_is_read(
        gateway, grader, tmp_path, store, secret_dir, caplog, name):
    rollout, events, logs = run(gateway, grader, tmp_path, store, attacks(store, secret_dir)[name], caplog)
    details = assert_first_attempt_zero(rollout, events)
    assert details["tamper"] is True and "resolves outside the tree" in details["tamper_reasons"][0]
    assert "model_patch" not in details
    everything = json.dumps([e.payload for e in events]) + (rollout.error or "") + logs
    assert SECRET not in everything
    assert "def clamp" not in everything  # no text of the tree behind the link


def test_repo_as_a_link_inside_the_working_directory_is_tampering(gateway, grader, tmp_path, store, caplog):
    attack = [["rename", "repo", "mine"], ["symlink", "mine", "repo"]]
    rollout, events, _ = run(gateway, grader, tmp_path, store, attack, caplog)
    details = assert_first_attempt_zero(rollout, events)
    assert details["tamper"] is True and "is a link" in details["tamper_reasons"][0]


@pytest.mark.parametrize("attack, expected", [
    ([["badname", "repo"]], "not UTF-8"),
    ([["write_bytes", "repo/blob.bin", str(CAP_BYTES + 1)]], "max_file_bytes"),
    ([["chmod", "repo/tinymath.py", "000"]], "could not be diffed"),
    ([["mkfifo", "repo/pipe"]], "is a FIFO"),
])
def test_a_tree_the_grader_cannot_read_is_the_agents_failure_on_the_first_attempt(
        gateway, grader, tmp_path, store, caplog, attack, expected):
    rollout, events, _ = run(gateway, grader, tmp_path, store, attack, caplog)
    details = assert_first_attempt_zero(rollout, events)
    if expected is not None:
        assert expected in json.dumps(details), details
    assert details.get("tamper") is not True
