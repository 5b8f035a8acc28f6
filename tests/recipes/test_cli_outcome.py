"""How a CLI run ends, as mini-swe-agent's harness reports it: the classification table (pure) and the harness program
itself with stand-in CLIs (small scripts) for each ending: done, step limit, error exit, killed by a signal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from recipes.cli_harness.harness import OUTPUT_FILE
from recipes.cli_harness.launch import HOME_DIR, REPO_DIR
from recipes.cli_harness.outcome import classify

CLAUDE_OK = json.dumps({"type": "result", "subtype": "success", "is_error": False, "num_turns": 4,
                        "stop_reason": "end_turn", "result": "fixed"})
CLAUDE_TURNS = json.dumps({"type": "result", "subtype": "error_max_turns", "is_error": True, "num_turns": 3})
CLAUDE_API = json.dumps({"type": "result", "subtype": "success", "is_error": True, "terminal_reason": "api_error",
                         "api_error_status": 503})
CODEX_OK = "\n".join(json.dumps(e) for e in [
    {"type": "thread.started"}, {"type": "item.completed", "item": {"type": "command_execution"}},
    {"type": "item.completed", "item": {"type": "command_execution"}}, {"type": "turn.completed"}])
CODEX_FAILED = "\n".join(json.dumps(e) for e in [{"type": "turn.started"},
                                                 {"type": "turn.failed", "error": {"message": "HTTP 502"}}])


@pytest.mark.parametrize(("cli", "code", "stdout", "status", "exit_code", "details"), [
    ("claude-code", 0, "noise\n" + CLAUDE_OK, "Completed", 0, {"num_turns": 4, "stop_reason": "end_turn"}),
    ("claude-code", 1, CLAUDE_TURNS, "LimitsExceeded", 0, {"subtype": "error_max_turns"}),
    ("claude-code", 1, CLAUDE_API, "Error", 1, {"api_error_status": 503, "terminal_reason": "api_error"}),
    ("claude-code", -9, "", "KilledBySignal", 137, {"signal": 9}),
    ("claude-code", 3, "not json", "Error", 3, {}),
    ("codex", 0, CODEX_OK, "Completed", 0, {"last_event": "turn.completed", "commands": 2}),
    ("codex", 1, CODEX_FAILED, "Error", 1, {"last_event": "turn.failed", "commands": 0}),
    ("codex", -11, CODEX_OK, "KilledBySignal", 139, {"signal": 11}),
])
def test_classification_table(cli, code, stdout, status, exit_code, details):
    outcome = classify(cli, code, stdout)
    assert (outcome.exit_status, outcome.exit_code) == (status, exit_code)
    assert details.items() <= outcome.details.items()


def stand_in_cli(path: Path, body: str) -> Path:
    """A script in place of the CLI's binary: records its argv, cwd and environment, then does `body` (padded past
    the size of Claude Code's npm placeholder, which the harness refuses)."""
    padding = "#" * 5000
    path.write_text(f'#!/bin/sh\n{padding}\necho "$@" > ../argv.txt\npwd > ../cwd.txt\nenv > ../env.txt\n{body}\n')
    path.chmod(0o755)
    return path


def run_harness(tmp_path: Path, cli: str, body: str) -> tuple[subprocess.CompletedProcess, Path]:
    workdir = tmp_path / "work"
    (workdir / REPO_DIR).mkdir(parents=True)
    (workdir / "task.json").write_text(json.dumps({"id": "t", "problem_statement": "fix it", "store": "/s"}))
    binary = stand_in_cli(tmp_path / "cli", body)
    env = {"PATH": os.environ["PATH"], "OPENAI_BASE_URL": "http://127.0.0.1:1/r/r1/v1", "OPENAI_API_KEY": "rk-1",
           "HARNESSRL_TASK": str(workdir / "task.json"), "PYTHONPATH": str(Path.cwd())}
    done = subprocess.run([sys.executable, "-m", "recipes.cli_harness.harness", cli, str(binary)], cwd=workdir,
                          env=env, capture_output=True, text=True, timeout=60)
    return done, workdir


def summary(done: subprocess.CompletedProcess) -> dict:
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_harness_runs_the_cli_in_the_repository_and_keeps_its_output(tmp_path):
    done, workdir = run_harness(tmp_path, "claude-code", f"echo '{CLAUDE_OK}'")
    assert done.returncode == 0, done.stderr
    assert {"cli": "claude-code", "exit_status": "Completed", "num_turns": 4}.items() <= summary(done).items()
    assert (workdir / "cwd.txt").read_text().strip() == str(workdir / REPO_DIR)
    assert json.loads((workdir / OUTPUT_FILE).read_text())["result"] == "fixed"
    env = dict(line.split("=", 1) for line in (workdir / "env.txt").read_text().splitlines() if "=" in line)
    assert env["HOME"] == str(workdir / HOME_DIR) and env["ANTHROPIC_API_KEY"] == "rk-1"
    assert "OPENAI_API_KEY" not in env and "HARNESSRL_TASK" not in env
    assert (workdir / HOME_DIR).stat().st_mode & 0o777 == 0o700


def test_harness_writes_codex_config_before_the_cli_starts(tmp_path):
    done, workdir = run_harness(tmp_path, "codex", 'cat "$CODEX_HOME/config.toml" > ../seen.toml')
    assert done.returncode == 0 and summary(done)["exit_status"] == "Completed"
    config = workdir / HOME_DIR / ".codex" / "config.toml"
    assert (workdir / "seen.toml").read_text() == config.read_text() and config.stat().st_mode & 0o777 == 0o600
    assert 'base_url = "http://127.0.0.1:1/r/r1/v1"' in config.read_text()


def test_harness_passes_an_error_exit_through(tmp_path):
    done, _ = run_harness(tmp_path, "codex", "exit 3")
    assert done.returncode == 3 and summary(done)["exit_status"] == "Error"


def test_step_limit_is_a_normal_end(tmp_path):
    done, _ = run_harness(tmp_path, "claude-code", f"echo '{CLAUDE_TURNS}'; exit 1")
    assert done.returncode == 0 and summary(done)["exit_status"] == "LimitsExceeded"


def test_a_cli_killed_by_a_signal_is_reported_as_the_runner_reads_a_crash(tmp_path):
    done, _ = run_harness(tmp_path, "codex", "kill -SEGV $$")
    assert done.returncode == 128 + signal.SIGSEGV and summary(done)["exit_status"] == "KilledBySignal"


def test_harness_without_the_cli_installed_names_the_fix(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path.cwd())}
    done = subprocess.run([sys.executable, "-m", "recipes.cli_harness.harness", "codex", str(tmp_path / "codex")],
                          cwd=tmp_path, capture_output=True, text=True, env=env)
    assert done.returncode == 2 and "make harnesses" in done.stderr


def test_harness_refuses_a_workdir_without_repo(tmp_path):
    binary = stand_in_cli(tmp_path / "cli", "exit 0")
    done = subprocess.run([sys.executable, "-m", "recipes.cli_harness.harness", "codex", str(binary)], cwd=tmp_path,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    assert done.returncode == 2 and "no repo/" in done.stderr
    usage = subprocess.run([sys.executable, "-m", "recipes.cli_harness.harness", "aider", "/x"], cwd=tmp_path,
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    assert usage.returncode == 2 and "claude-code|codex" in usage.stderr


@pytest.mark.slow
def test_sigterm_to_the_harness_ends_the_cli_group(tmp_path):
    """The runner's stop (a timeout, a cancel) reaches the CLI and what it started, through the harness."""
    workdir = tmp_path / "work"
    (workdir / REPO_DIR).mkdir(parents=True)
    (workdir / "task.json").write_text(json.dumps({"id": "t", "problem_statement": "fix it", "store": "/s"}))
    binary = stand_in_cli(tmp_path / "cli", "sleep 300 & echo $! > ../child.pid; wait")
    env = {"PATH": os.environ["PATH"], "OPENAI_BASE_URL": "http://127.0.0.1:1/r/r1/v1", "OPENAI_API_KEY": "rk-1",
           "HARNESSRL_TASK": str(workdir / "task.json"), "PYTHONPATH": str(Path.cwd())}
    harness = subprocess.Popen([sys.executable, "-m", "recipes.cli_harness.harness", "codex", str(binary)],
                               cwd=workdir, env=env, stdout=subprocess.PIPE, text=True)
    child_pid = workdir / "child.pid"
    for _ in range(200):
        if child_pid.exists() and child_pid.read_text().strip():
            break
        time.sleep(0.05)
    harness.send_signal(signal.SIGTERM)
    stdout, _ = harness.communicate(timeout=30)
    assert harness.returncode == 128 + signal.SIGTERM and summary_of(stdout)["exit_status"] == "KilledBySignal"
    with pytest.raises(ProcessLookupError):
        for _ in range(100):
            os.kill(int(child_pid.read_text()), 0)
            time.sleep(0.05)


def summary_of(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])
