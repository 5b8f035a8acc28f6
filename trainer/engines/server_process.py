"""An engine server as a child process: launch with a log file, wait for /health, stop the whole process group."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import IO

import httpx

HEALTH_POLL_S = 0.2
STOP_GRACE_S = 10.0
REPO_ROOT = Path(__file__).resolve().parents[2]
"""The project root: child processes import the project's packages from here."""


def with_repo_on_path(env: dict[str, str]) -> dict[str, str]:
    """`env` with the project root first on PYTHONPATH, for child processes started outside the project folder."""
    path = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return {**env, "PYTHONPATH": path}


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """One server subprocess in its own process group, its output in `log_path`."""

    def __init__(self, name: str, base_url: str, log_path: Path) -> None:
        self.name = name
        self.base_url = base_url
        self.log_path = log_path
        self._process: subprocess.Popen | None = None
        self._log: IO[bytes] | None = None

    def start(self, command: list[str], env: dict[str, str], startup_timeout_s: float) -> None:
        """Launch and return once GET /health answers 200; errors quote the end of the server log."""
        self._log = self.log_path.open("wb")
        self._process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        deadline = time.monotonic() + startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with code {self._process.returncode} before becoming "
                                   f"healthy; its log ({self.log_path}) ends with:\n{self.log_tail()}")
            if self.healthy():
                return
            time.sleep(HEALTH_POLL_S)
        tail = self.log_tail()
        self.stop()
        raise TimeoutError(f"{self.name} not healthy after {startup_timeout_s} s; raise startup_timeout_s or "
                           f"read {self.log_path}:\n{tail}")

    def healthy(self) -> bool:
        """Whether GET /health answers 200 now."""
        try:
            return httpx.get(f"{self.base_url}/health", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the server's log."""
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        """SIGTERM, then SIGKILL to the whole process group after a grace period (engine workers included)."""
        if self._process is not None:
            if self._process.poll() is None:
                self._process.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._process.wait(timeout=STOP_GRACE_S)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()
        self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None
