"""LocalRunner: exit codes, crashes, timeouts that kill the whole process group, the concurrency bound, cleanup."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from controller.runners.base import RunnerFullError, RunnerStartError, RunResult, RunSpec, Termination
from controller.runners.local import LocalRunner

# Starts a grandchild that ignores SIGTERM, records its pid, then does `then`.
GRANDCHILD = """
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(1000)"])
open("grandchild.pid", "w").write(str(child.pid))
{then}
"""


def spec(tmp_path: Path, code: str, *, rollout_id: str = "r1", timeout_s: float = 30.0) -> RunSpec:
    workdir = tmp_path / rollout_id
    workdir.mkdir(parents=True, exist_ok=True)
    return RunSpec(rollout_id=rollout_id, attempt=1, command=(sys.executable, "-c", code),
                   base_url="http://gw/r/r1/v1", api_key="hrl.key", task={"mode": "x"}, workdir=workdir,
                   timeout_s=timeout_s, stdout_path=tmp_path / "logs" / f"{rollout_id}.out",
                   stderr_path=tmp_path / "logs" / f"{rollout_id}.err", extra_env={"EXTRA": "1"})


def wait_results(runner: LocalRunner, count: int, timeout_s: float = 30.0) -> list[RunResult]:
    results: list[RunResult] = []
    deadline = time.monotonic() + timeout_s
    while len(results) < count:
        assert time.monotonic() < deadline, f"only {len(results)} of {count} attempts ended"
        results += runner.poll()
        time.sleep(0.02)
    return results


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")  # a zombie nobody reaped yet is dead


def wait_dead(pid: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not alive(pid)


@pytest.mark.parametrize(("code", "termination", "exit_code"), [
    ("pass", Termination.EXITED, 0),
    ("import sys; sys.exit(3)", Termination.EXITED, 3),
    ("raise SystemExit('bad')", Termination.EXITED, 1),
    ("import os; os.abort()", Termination.CRASHED, None),
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", Termination.CRASHED, None),
])
def test_exit_statuses(tmp_path, code, termination, exit_code):
    runner = LocalRunner(2)
    runner.start(spec(tmp_path, code))
    [result] = wait_results(runner, 1)
    assert (result.rollout_id, result.termination, result.exit_code) == ("r1", termination, exit_code)
    if termination == Termination.CRASHED:
        assert "SIG" in result.detail
    runner.release("r1")


def test_contract_env_workdir_and_logs(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_ADMIN_TOKEN", "admin-secret")
    monkeypatch.setenv("HARNESSRL_GRADER_TOKEN", "grader-secret")
    code = "import os, sys; print(os.getcwd()); print(sorted(os.environ)); print(os.environ['OPENAI_API_KEY']);" \
           " print('to stderr', file=sys.stderr)"
    runner = LocalRunner(1)
    run = spec(tmp_path, code)
    runner.start(run)
    [result] = wait_results(runner, 1)
    assert result.exit_code == 0
    cwd, names, key = run.stdout_path.read_text().splitlines()
    assert cwd == str(run.workdir) and key == "hrl.key"
    assert eval(names) == sorted(["EXTRA", "HARNESSRL_TASK", "HOME", "OPENAI_API_KEY", "OPENAI_BASE_URL",
                                  *[n for n in ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR") if n in os.environ]])
    assert run.stderr_path.read_text() == "to stderr\n"


def test_timeout_kills_the_whole_group_including_a_grandchild(tmp_path):
    runner = LocalRunner(1, kill_grace_s=0.5)
    run = spec(tmp_path, GRANDCHILD.format(then="time.sleep(1000)"), timeout_s=1.0)
    started = time.monotonic()
    runner.start(run)
    [result] = wait_results(runner, 1)
    assert result.termination == Termination.TIMED_OUT and result.exit_code is None
    assert 1.0 <= time.monotonic() - started < 10
    grandchild = int((run.workdir / "grandchild.pid").read_text())
    assert wait_dead(grandchild), "the grandchild ignoring SIGTERM must be SIGKILLed with its group"


def test_harness_ignoring_sigterm_is_killed_after_grace(tmp_path):
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); " \
           "time.sleep(1000)"
    runner = LocalRunner(1, kill_grace_s=0.3)
    runner.start(spec(tmp_path, code, timeout_s=0.5))
    [result] = wait_results(runner, 1, timeout_s=10)
    assert result.termination == Termination.TIMED_OUT
    assert result.duration_s >= 0.8


def test_daemons_left_behind_by_a_harness_that_exited_are_killed(tmp_path):
    runner = LocalRunner(1)
    run = spec(tmp_path, GRANDCHILD.format(then="sys.exit(0)"))
    runner.start(run)
    [result] = wait_results(runner, 1)
    assert result.exit_code == 0
    grandchild = int((run.workdir / "grandchild.pid").read_text())
    assert wait_dead(grandchild)
    runner.release("r1")
    assert runner.free_slots() == 1


def test_concurrency_bound(tmp_path):
    runner = LocalRunner(2)
    runner.start(spec(tmp_path, "import time; time.sleep(0.5)", rollout_id="a"))
    runner.start(spec(tmp_path, "import time; time.sleep(0.5)", rollout_id="b"))
    assert runner.free_slots() == 0
    with pytest.raises(RunnerFullError, match="2 slots"):
        runner.start(spec(tmp_path, "pass", rollout_id="c"))
    assert {r.rollout_id for r in wait_results(runner, 2)} == {"a", "b"}
    assert runner.free_slots() == 2
    with pytest.raises(RunnerFullError, match="release it first"):
        runner.start(spec(tmp_path, "pass", rollout_id="a"))
    runner.release("a")
    runner.start(spec(tmp_path, "pass", rollout_id="a"))
    runner.close()


def test_start_failure_is_a_runner_start_error(tmp_path):
    runner = LocalRunner(1)
    run = spec(tmp_path, "pass")
    missing = RunSpec(**{**run.__dict__, "command": ("/nonexistent/harness",)})
    with pytest.raises(RunnerStartError, match="/nonexistent/harness"):
        runner.start(missing)
    assert runner.free_slots() == 1


def test_cancel_and_close(tmp_path):
    runner = LocalRunner(2, kill_grace_s=0.2)
    runner.start(spec(tmp_path, "import time; time.sleep(1000)", rollout_id="a"))
    runner.start(spec(tmp_path, "import time; time.sleep(1000)", rollout_id="b"))
    runner.cancel("a")
    [result] = wait_results(runner, 1)
    assert (result.rollout_id, result.termination) == ("a", Termination.CANCELLED)
    runner.close()
    assert runner.free_slots() == 2 and runner.poll() == []
