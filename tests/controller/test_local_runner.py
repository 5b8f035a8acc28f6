"""LocalRunner: exit codes, crashes, timeouts that kill everything the harness started, the concurrency bound,
cleanup; the sandbox it runs harnesses in (unprivileged, no secrets, only its rollout's gateway path, fails closed)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from controller.runners.base import RunnerFullError, RunnerStartError, RunResult, RunSpec, Termination
from controller.runners.harness_sandbox import HarnessSandbox
from controller.runners.local import LocalRunner
from tests.sandbox.support import fresh_uid, wait_no_processes
from tests.sandbox.test_forwarder import Upstream
from tests.services import wait_for_file

# Starts a grandchild that ignores SIGTERM in a session of its own, then does `then`.
GRANDCHILD = """
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(1000)"], start_new_session=True)
open("grandchild.pid", "w").write(str(child.pid))
{then}
"""


def own_uid_runner(**kwargs) -> tuple[LocalRunner, int]:
    """A one-slot runner whose harness runs as a uid no other test uses (its processes can be counted)."""
    uid = fresh_uid()
    return LocalRunner(1, sandbox=HarnessSandbox(first_uid=uid), **kwargs), uid


def spec(tmp_path: Path, code: str, *, rollout_id: str = "r1", timeout_s: float = 30.0,
         gateway: str = "http://gw") -> RunSpec:
    workdir = tmp_path / rollout_id
    workdir.mkdir(parents=True, exist_ok=True)
    return RunSpec(rollout_id=rollout_id, attempt=1, command=(sys.executable, "-c", code),
                   base_url=f"{gateway}/r/{rollout_id}/v1", api_key="hrl.key", task={"mode": "x"}, workdir=workdir,
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
                                  "USER", "LOGNAME", "PWD",  # set by the sandbox
                                  *[n for n in ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR") if n in os.environ]])
    assert run.stderr_path.read_text() == "to stderr\n"


@pytest.mark.slow
def test_timeout_kills_everything_including_a_grandchild(tmp_path):
    runner, uid = own_uid_runner(kill_grace_s=0.5)
    run = spec(tmp_path, GRANDCHILD.format(then="time.sleep(1000)"), timeout_s=3.0)  # time to start the grandchild
    started = time.monotonic()
    runner.start(run)
    [result] = wait_results(runner, 1)
    assert result.termination == Termination.TIMED_OUT and result.exit_code is None
    assert 3.0 <= time.monotonic() - started < 15
    assert (run.workdir / "grandchild.pid").exists()
    assert wait_no_processes(uid) == [], "the grandchild ignoring SIGTERM must be SIGKILLed with its sandbox"


@pytest.mark.slow
def test_harness_ignoring_sigterm_is_killed_after_grace(tmp_path):
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); " \
           "time.sleep(1000)"
    runner = LocalRunner(1, kill_grace_s=0.3)
    run = spec(tmp_path, code, timeout_s=2.0)  # time for the sandboxed interpreter to start and ignore SIGTERM
    runner.start(run)
    [result] = wait_results(runner, 1, timeout_s=15)
    assert run.stdout_path.read_text() == "ready\n"
    assert result.termination == Termination.TIMED_OUT
    assert result.duration_s >= 2.3


def test_daemons_left_behind_by_a_harness_that_exited_are_killed(tmp_path):
    runner, uid = own_uid_runner()
    run = spec(tmp_path, GRANDCHILD.format(then="sys.exit(0)"))
    runner.start(run)
    [result] = wait_results(runner, 1)
    assert result.exit_code == 0
    assert (run.workdir / "grandchild.pid").exists()
    assert wait_no_processes(uid) == []
    runner.release("r1")
    assert runner.free_slots() == 1


@pytest.mark.slow
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


# Runs inside the harness sandbox: who it is, what it can reach, what it can read.
PROBE = """
import json, os, urllib.request, urllib.error
base = os.environ["OPENAI_BASE_URL"]
def post(url):
    try:
        return urllib.request.urlopen(urllib.request.Request(url, data=b"{}", method="POST"), timeout=10).status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return "unreachable"
secrets = [p for p in os.listdir("/proc") if p.isdigit()
           and b"admin-secret" in (open(f"/proc/{p}/environ", "rb").read() if os.access(f"/proc/{p}/environ", os.R_OK)
           else b"")]
print(json.dumps({"uid": os.getuid(), "base": base, "own": post(base + "/chat/completions"),
                  "other": post(base.replace("/r/r1/", "/r/r2/") + "/chat/completions"),
                  "admin": post(base.split("/r/")[0] + "/admin/rollouts"), "secrets": secrets,
                  "store": os.path.exists(os.environ["STORE"])}))
"""


def test_harness_runs_unprivileged_and_reaches_only_its_rollouts_gateway_path(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_ADMIN_TOKEN", "admin-secret")
    upstream = Upstream()
    store = tmp_path / "store"
    store.mkdir()
    run = spec(tmp_path, PROBE, gateway=f"http://127.0.0.1:{upstream.port}")
    run = RunSpec(**{**run.__dict__, "extra_env": {"STORE": str(store)}})
    runner = LocalRunner(1)
    runner.start(run)
    [result] = wait_results(runner, 1)
    upstream.server.shutdown()
    assert result.exit_code == 0, run.stderr_path.read_text()
    seen = __import__("json").loads(run.stdout_path.read_text())
    assert seen["uid"] >= HarnessSandbox().first_uid and seen["base"] == "http://127.0.0.1:18080/r/r1/v1"
    assert (seen["own"], seen["other"], seen["admin"]) == (200, 403, 403)
    assert upstream.seen == ["/r/r1/v1/chat/completions"]
    assert seen["secrets"] == [] and seen["store"] is False


def test_no_sandbox_no_start(tmp_path, monkeypatch):
    """Fails closed: where the sandbox cannot be built the attempt is an infra failure, never an unsandboxed run."""
    import sandbox.probe as probe

    monkeypatch.setattr(probe, "tool", lambda name: f"/nonexistent/{name}")
    probe.sandbox_problem.cache_clear()
    try:
        runner = LocalRunner(1)
        run = spec(tmp_path, "open('ran', 'w').write('unsandboxed')")
        with pytest.raises(RunnerStartError, match="install bubblewrap.*Nothing is run unsandboxed"):
            runner.start(run)
        assert runner.free_slots() == 1 and not (run.workdir / "ran").exists()
    finally:
        probe.sandbox_problem.cache_clear()


def test_network_allowed_keeps_the_base_url_and_says_what_it_weakens(tmp_path, caplog):
    runner = LocalRunner(1, sandbox=HarnessSandbox(allow_network=True))
    assert "the sandbox shares the host's network" in caplog.text and "everything else holds" in caplog.text
    run = spec(tmp_path, "import os; print(os.environ['OPENAI_BASE_URL'], os.getuid())")
    runner.start(run)
    [result] = wait_results(runner, 1)
    base, uid = run.stdout_path.read_text().split()
    assert result.exit_code == 0 and base == "http://gw/r/r1/v1" and int(uid) != 0


def test_an_https_or_foreign_base_url_is_refused(tmp_path):
    run = spec(tmp_path, "pass")
    with pytest.raises(RunnerStartError, match="cannot be forwarded"):
        LocalRunner(1).start(RunSpec(**{**run.__dict__, "base_url": "https://gw/r/r1/v1"}))


def test_a_harness_cannot_kill_or_write_into_another_rollouts_attempt(tmp_path):
    # the victim runs until the test lets it finish (a file `go` in its workdir), after the attack ended
    victim = spec(tmp_path, "import os, time\nopen('started', 'w').write('1')\nwhile not os.path.exists('go'):\n"
                            "    time.sleep(0.02)\nprint('victim done')", rollout_id="victim")
    attack = (f"import subprocess\n"
              f"try:\n    open({str(victim.workdir / 'planted')!r}, 'w').write('x'); print('planted')\n"
              f"except OSError as e:\n    print('refused', type(e).__name__, flush=True)\n"
              f"subprocess.run(['/bin/sh', '-c', 'kill -9 -1'])  # every process it can see: its own\n")
    attacker = spec(tmp_path, attack, rollout_id="attacker")
    runner = LocalRunner(2)
    runner.start(victim)
    wait_for_file(victim.workdir / "started")
    runner.start(attacker)
    results = {r.rollout_id: r for r in wait_results(runner, 1)}
    (victim.workdir / "go").touch()
    results |= {r.rollout_id: r for r in wait_results(runner, 1)}
    assert results["victim"].exit_code == 0 and victim.stdout_path.read_text() == "victim done\n"
    assert not (victim.workdir / "planted").exists()
    assert attacker.stdout_path.read_text() == "refused FileNotFoundError\n"  # the other workdir is not there at all
    assert results["attacker"].termination == Termination.CRASHED  # kill -9 -1 killed only the attacker's own
