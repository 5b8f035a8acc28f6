"""Process helpers for gateway tests: free ports, starting and killing real server processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ADMIN_TOKEN = "test-admin-token"
GRADER_TOKEN = "test-grader-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 180.0) -> None:
    """Until `url` answers 200, or the process exits. The default is generous: a gateway that starts in seconds
    took over 60 s in a clean-clone CI run beside a training run (memory nearly full), and no test measures it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} was healthy")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} not healthy after {timeout_s} s")


@dataclass
class GatewayProcess:
    """A real `harnessrl gateway serve` process on a free port, restartable on the same database (`db_url`, a
    PostgreSQL database for one, instead of the SQLite file `db_path`)."""

    db_path: Path | None = None
    port: int = field(default_factory=free_port)
    extra_env: dict[str, str] = field(default_factory=dict)
    config_path: Path | None = None
    proc: subprocess.Popen | None = None
    db_url: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> GatewayProcess:
        env = {**os.environ, "HARNESSRL_ADMIN_TOKEN": ADMIN_TOKEN, "HARNESSRL_GRADER_TOKEN": GRADER_TOKEN,
               **self.extra_env}
        cmd = [sys.executable, "-m", "gateway.cli", "serve", "--port", str(self.port),
               "--db", self.db_url or f"sqlite:///{self.db_path}"]
        if self.config_path is not None:
            cmd += ["--config", str(self.config_path)]
        self.proc = subprocess.Popen(cmd, env=env)
        try:
            wait_healthy(self.url + "/health", self.proc)
        except BaseException:  # a gateway that never became healthy is not left running (a CI run leaked one)
            self.stop()
            raise
        return self

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class ScriptedProcess:
    """`python -m gateway.scripted` on a free port."""

    args: list[str] = field(default_factory=list)
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> ScriptedProcess:
        self.proc = subprocess.Popen([sys.executable, "-m", "gateway.scripted", "--port", str(self.port), *self.args])
        try:
            wait_healthy(self.base_url + "/models", self.proc)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
