"""The SWE agent's commands where the pod is the sandbox (`HARNESSRL_SWE_SANDBOX=container`, as the shipped
Kubernetes controller config sets for agent pods, where bwrap cannot build its namespaces): the allowlisted
environment, the time limit, the output cap and the command's process group ended with it."""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from recipes.swe.harness import command_runner
from recipes.swe.sandbox import GIT_DISABLED_MESSAGE, MAX_OUTPUT_BYTES, SANDBOX_MODE_ENV, ContainerCommands, Sandbox
from tests.services import process_gone

ROOT = Path(__file__).resolve().parents[3]


def commands(tmp_path: Path) -> ContainerCommands:
    (tmp_path / "repo").mkdir()
    return ContainerCommands(cwd=tmp_path / "repo", shim_dir=tmp_path / "scratch" / "shim")


def test_the_environment_is_the_allowlist_and_git_is_the_shim(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "hrl.secret")
    result = commands(tmp_path).run("env; git status", timeout_s=30)
    assert "hrl.secret" not in result.output and "OPENAI_API_KEY" not in result.output
    assert f"HOME={tmp_path / 'repo'}" in result.output and GIT_DISABLED_MESSAGE in result.output


def test_a_command_past_its_limit_is_killed_with_what_it_left_in_the_background(tmp_path):
    marker, pid_file = tmp_path / "repo" / "still-running", tmp_path / "repo" / "child.pid"
    runner = commands(tmp_path)
    started = time.monotonic()
    result = runner.run(f"(sleep 5; touch {marker}) & echo $! > {pid_file}; sleep 30", timeout_s=1)
    assert result.timed_out and result.returncode == -9 and time.monotonic() - started < 10
    # the background child died with the command's group: gone now (not after its 5 s), and it never wrote
    assert process_gone(int(pid_file.read_text())) and not marker.exists()


def test_output_is_capped(tmp_path):
    result = commands(tmp_path).run("head -c 50000000 /dev/zero | tr '\\0' x", timeout_s=60)
    assert result.returncode == 0 and result.dropped_bytes > 0
    assert len(result.output) < MAX_OUTPUT_BYTES + 200


def test_the_mode_comes_from_the_controllers_config_and_the_shipped_config_sets_it(tmp_path, monkeypatch):
    work, store = tmp_path / "work", tmp_path / "store"
    (work / "repo").mkdir(parents=True)
    store.mkdir()
    monkeypatch.setenv(SANDBOX_MODE_ENV, "container")
    assert isinstance(command_runner({"store": str(store)}, work, tmp_path / "shim"), ContainerCommands)
    monkeypatch.delenv(SANDBOX_MODE_ENV)
    assert isinstance(command_runner({"store": str(store)}, work, tmp_path / "scratch" / "shim"), Sandbox)
    shipped = yaml.safe_load((ROOT / "deploy/k8s/base/controller-config.yaml").read_text())
    assert shipped["runner"] == "kubernetes" and shipped["harness_env"] == {SANDBOX_MODE_ENV: "container"}
