"""The sandbox channel end to end on this machine: the pod-side bash loop (`controller.sandbox_channel`) in a real
process, driven by the harness-side client and mini-swe-agent's environment over a shared directory."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from controller.sandbox_channel import sandbox_command
from recipes.swe_bench import sandbox_client
from recipes.swe_bench.harness import PATCH_ERROR_FILE, PATCH_FILE, diff_command, take_patch
from recipes.swe_bench.sandbox_client import SandboxClient, build_environment


@pytest.fixture
def sandbox(tmp_path):
    ipc = tmp_path / "ipc"
    process = subprocess.Popen(sandbox_command(str(ipc)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    client = SandboxClient(ipc, poll_s=0.02, grace_s=3.0)
    client.wait_ready(10)
    yield client, process
    if process.poll() is None:
        process.kill()
        process.wait()


def test_commands_run_in_their_directory_with_output_and_exit_status(sandbox, tmp_path):
    client, _ = sandbox
    result = client.run("pwd; echo out; echo err >&2; exit 3", str(tmp_path), 10)
    assert (result.output.splitlines(), result.returncode, result.timed_out) == ([str(tmp_path), "out", "err"], 3,
                                                                               False)
    assert client.run("cat", str(tmp_path), 10).output == ""  # stdin is empty, not the channel
    assert sorted(p.name for p in client.ipc_dir.iterdir()) == ["ready"]  # each command's files are removed


def test_a_missing_directory_is_an_error_not_a_hang(sandbox):
    client, _ = sandbox
    result = client.run("echo never", "/no/such/dir", 10)
    assert result.returncode == 126 and "no directory /no/such/dir" in result.output


@pytest.mark.slow
def test_a_command_past_its_timeout_is_killed_with_its_children(sandbox, tmp_path):
    client, _ = sandbox
    marker = tmp_path / "child-survived"
    started = time.monotonic()
    result = client.run(f"(sleep 1.5; touch {marker}) & sleep 30", str(tmp_path), 1)
    assert result.timed_out and result.returncode in (124, 137)
    assert time.monotonic() - started < 10
    time.sleep(1.5)  # the kill came 1 s after the start: a surviving child would have touched the marker 1 s ago
    assert not marker.exists()  # the whole process group went
    assert client.run("echo next", str(tmp_path), 5).output == "next\n"  # the loop goes on


def test_no_sandbox_is_a_timeout_naming_the_directory(tmp_path, monkeypatch):
    with pytest.raises(TimeoutError, match="no sandbox answered"):
        SandboxClient(tmp_path, poll_s=0.01).wait_ready(0.1)
    monkeypatch.setattr(sandbox_client, "KILL_GRACE_S", 0)  # the sandbox's SIGKILL grace, 5 s, is not what is tested
    silent = SandboxClient(tmp_path, poll_s=0.01, grace_s=0.0)
    result = silent.run("true", "/", 0)
    assert result.timed_out and result.returncode == -1  # nobody ran it: reported, not waited on forever


def test_sigterm_stops_the_loop_with_exit_0(sandbox, tmp_path):
    client, process = sandbox
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=5) == 0  # the kubelet stopping the sidecar does not read as a failure


@pytest.mark.slow
def test_mini_swe_agent_environment_runs_in_the_sandbox_and_submits(sandbox, tmp_path):
    from minisweagent.exceptions import Submitted

    client, _ = sandbox
    environment = build_environment(client, str(tmp_path), 5)
    output = environment.execute({"command": "echo hi > f.txt && cat f.txt"})
    assert output == {"output": "hi\n", "returncode": 0, "exception_info": ""}
    assert (tmp_path / "f.txt").read_text() == "hi\n"
    slow = environment.execute({"command": "sleep 5"}, timeout=1)
    assert slow["exception_info"] == "The command timed out after 1 s and was killed."
    assert "OPENAI_API_KEY" not in environment.get_template_vars()
    with pytest.raises(Submitted) as submitted:
        environment.execute({"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo done"})
    assert submitted.value.messages[0]["extra"]["submission"] == "done\n"


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def test_the_patch_is_the_diff_against_the_base_commit_with_new_files(sandbox, tmp_path):
    client, _ = sandbox
    repo, workdir = tmp_path / "testbed", tmp_path / "work"
    repo.mkdir()
    workdir.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.py").write_text("x = 1\n")
    _git(repo, "add", "a.py")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "a.py").write_text("x = 2\n")
    (repo / "new.py").write_text("y = 1\n")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "the agent committed")
    written = take_patch(client, base, workdir, str(repo))
    assert written == workdir / PATCH_FILE
    patch = written.read_text()
    assert "-x = 1\n+x = 2" in patch and "+++ b/new.py" in patch  # committed and untracked changes both count
    failed = take_patch(client, "0" * 40, workdir, str(repo))
    assert failed == workdir / PATCH_ERROR_FILE and "git diff exited" in failed.read_text()


def test_the_diff_command_quotes_the_base_and_defaults_to_head():
    assert diff_command(None).endswith(" HEAD")
    assert diff_command("abc; rm -rf /").endswith("'abc; rm -rf /'")
