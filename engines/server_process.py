"""A server as a child process: launch with a log file, wait for /health, stop the whole process group."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Self

import httpx

HEALTH_POLL_S = 0.2
STOP_GRACE_S = 10.0
GROUP_POLL_S = 0.1
REPO_ROOT = Path(__file__).resolve().parents[1]
"""The project root: child processes import the project's packages from here."""


def with_repo_on_path(env: dict[str, str]) -> dict[str, str]:
    """`env` with the project root first on PYTHONPATH, for child processes started outside the project folder."""
    path = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return {**env, "PYTHONPATH": path}


def dies_with_parent(command: list[str]) -> list[str]:
    """`command` wrapped so that it gets SIGTERM when the process starting it dies, however it dies (a SIGKILL after
    a Prefect cancellation's grace period included): util-linux's `setpriv --pdeathsig TERM` sets the signal, then
    execs `command` (same pid). The kernel ties the signal to the starting *thread*, so only a command started from
    the main thread is wrapped; without setpriv, or from another thread, `command` is returned unchanged."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or threading.current_thread() is not threading.main_thread():
        return command
    return [setpriv, "--pdeathsig", "TERM", "--", *command]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def stop_process_group(process: subprocess.Popen, grace_s: float) -> None:
    """Ends the process group that `process` leads (it was started with start_new_session=True): SIGTERM to the
    whole group, up to `grace_s` for the group to empty (the leader reaped meanwhile), then SIGKILL to what is left."""
    _signal_group(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        process.poll()  # reap the leader: an unreaped leader keeps the group alive
        if not _group_alive(process.pid):
            break
        time.sleep(GROUP_POLL_S)
    _signal_group(process.pid, signal.SIGKILL)
    process.wait()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    """True while a process of group `pgid` exists (a zombie not yet reaped counts)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


class ServerProcess:
    """One server subprocess in its own process group, its output appended to `log_path`."""

    def __init__(self, name: str, base_url: str, log_path: Path) -> None:
        self.name = name
        self.base_url = base_url
        self.log_path = log_path
        self._process: subprocess.Popen | None = None
        self._log: IO[bytes] | None = None
        self._log_start_bytes = 0

    def start(self, command: list[str], env: dict[str, str], startup_timeout_s: float) -> None:
        """Launch and return once GET /health answers 200; errors quote the server's log since this start.

        The log is appended to, so a server restarted on the same log path keeps its earlier output."""
        self._log = self.log_path.open("ab")
        self._log_start_bytes = self._log.tell()
        self._process = subprocess.Popen(dies_with_parent(command), stdout=self._log, stderr=subprocess.STDOUT,
                                         env=env, start_new_session=True)
        deadline = time.monotonic() + startup_timeout_s
        while time.monotonic() < deadline:
            code = self.exit_code()
            if code is not None:
                self.stop()  # its children may outlive it
                raise RuntimeError(f"{self.name} exited with code {code} before becoming healthy; its log "
                                   f"({self.log_path}) ends with:\n{self.log_tail()}")
            if self.healthy():
                return
            time.sleep(HEALTH_POLL_S)
        tail = self.log_tail()
        self.stop()
        raise TimeoutError(f"{self.name} not healthy after {startup_timeout_s} s; raise startup_timeout_s or "
                           f"read {self.log_path}:\n{tail}")

    def exit_code(self) -> int | None:
        """The server's exit code once it has exited; None while it runs or when it is not started."""
        return None if self._process is None else self._process.poll()

    def healthy(self) -> bool:
        """Whether GET /health answers 200 now."""
        try:
            return httpx.get(f"{self.base_url}/health", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def log_tail(self, chars: int = 3000) -> str:
        """The end of what the server logged since its last start."""
        with self.log_path.open("rb") as log:
            log.seek(self._log_start_bytes)
            return log.read().decode(errors="replace")[-chars:]

    def stop(self) -> None:
        """SIGTERM to the whole process group (engine workers included), SIGKILL after STOP_GRACE_S."""
        if self._process is not None:
            stop_process_group(self._process, STOP_GRACE_S)
        self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None


class ProcessEngine:
    """What every engine served by one `ServerProcess` (`self._server`) shares: `stop` and the context manager."""

    _server: ServerProcess

    def start(self) -> None:
        """Launches the server and waits until it is healthy (each engine builds its own command)."""
        raise NotImplementedError

    def stop(self) -> None:
        """Terminates the server: SIGTERM to its process group (engine workers included), SIGKILL after a grace."""
        self._server.stop()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
