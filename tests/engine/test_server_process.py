"""ServerProcess and stop_process_group against real processes: a whole process group is signalled, not its leader."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engines.server_process import ServerProcess, free_port, stop_process_group
from tests.services import process_gone, wait_for_file

SERVER = """
import http.server, subprocess, sys
port, child_script = int(sys.argv[1]), sys.argv[2]
subprocess.Popen(["sh", "-c", child_script])  # a worker in the server's process group, like uvicorn under mlflow
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
print("serving", flush=True)
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[[str], ServerProcess]]:
    """Starts the health-answering SERVER with a child running `child_script`; stops it after the test."""
    started: list[ServerProcess] = []

    def start(child_script: str) -> ServerProcess:
        port = free_port()
        server = ServerProcess("test server", f"http://127.0.0.1:{port}", tmp_path / "server.log")
        started.append(server)
        server.start([sys.executable, "-c", SERVER, str(port), child_script], dict(os.environ),
                     startup_timeout_s=30.0)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.mark.slow
def test_stop_sends_sigterm_to_the_servers_children(tmp_path: Path, start_server) -> None:
    marker = tmp_path / "child-terminated"
    pid_file = tmp_path / "child.pid"
    server = start_server(f"trap 'echo sigterm > {marker}; exit 0' TERM; echo $$ > {pid_file}; sleep 300 & wait")
    child = int(wait_for_file(pid_file))
    server.stop()
    assert marker.read_text().strip() == "sigterm", "the child was killed without a SIGTERM to shut down on"
    assert process_gone(child)


@pytest.mark.slow
def test_exit_code_reports_a_server_that_died(start_server) -> None:
    server = start_server("sleep 300")
    assert server.exit_code() is None
    os.kill(server._process.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while server.exit_code() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.exit_code() == -signal.SIGKILL


@pytest.mark.slow
def test_a_restart_appends_to_the_log_and_the_tail_starts_at_the_restart(tmp_path: Path,
                                                                          start_server) -> None:
    (tmp_path / "server.log").write_text("earlier run\n")
    server = start_server("sleep 300")
    server.stop()
    with pytest.raises(RuntimeError, match=r"exited with code 4 .*:\nrestarted\n$"):
        server.start(["sh", "-c", "echo restarted; exit 4"], dict(os.environ), startup_timeout_s=30.0)
    assert (tmp_path / "server.log").read_text() == "earlier run\nserving\nrestarted\n"


def test_a_server_that_exits_early_is_reported_with_its_log(tmp_path: Path) -> None:
    server = ServerProcess("broken server", f"http://127.0.0.1:{free_port()}", tmp_path / "server.log")
    with pytest.raises(RuntimeError, match=r"broken server exited with code 3 .*\n.*no config"):
        server.start(["sh", "-c", "echo no config; exit 3"], dict(os.environ), startup_timeout_s=30.0)


def test_stop_process_group_kills_children_that_ignore_sigterm(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    leader = subprocess.Popen(["sh", "-c", f"trap '' TERM; sleep 300 & echo $! > {pid_file}; wait"],
                              start_new_session=True)
    try:
        child = int(wait_for_file(pid_file))
        started = time.monotonic()
        stop_process_group(leader, grace_s=0.5)
    finally:
        if leader.poll() is None:
            os.killpg(leader.pid, signal.SIGKILL)
    assert time.monotonic() - started < 5.0
    assert leader.returncode == -signal.SIGKILL
    assert process_gone(child)


PARENT = """
import os, sys
sys.path.insert(0, sys.argv[4])
from pathlib import Path
from engines.server_process import ServerProcess
server_script, port, log = sys.argv[1], sys.argv[2], sys.argv[3]
server = ServerProcess("orphan", f"http://127.0.0.1:{port}", Path(log))
server.start([sys.executable, "-c", server_script, port, "sleep 300"], dict(os.environ), startup_timeout_s=30.0)
print(server._process.pid, flush=True)
os.kill(os.getpid(), 9)  # dies without stopping it, as a flow run killed after its cancellation grace period
"""


def test_a_server_gets_sigterm_when_the_process_that_started_it_is_killed(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    parent = subprocess.run([sys.executable, "-c", PARENT, SERVER, str(free_port()), str(tmp_path / "s.log"),
                             str(root)], capture_output=True, text=True, timeout=60)
    assert parent.returncode == -signal.SIGKILL, parent.stderr
    server_pid = int(parent.stdout.split()[0])
    deadline = time.monotonic() + 10
    while not process_gone(server_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    gone = process_gone(server_pid)
    if not gone:
        os.kill(server_pid, signal.SIGKILL)
    assert gone, "the server outlived the process that started it"
