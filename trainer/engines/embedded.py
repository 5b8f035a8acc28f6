"""`EmbeddedEngine`: the CPU engine server launched as a subprocess and driven over HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
HEALTH_POLL_S = 0.2
STOP_GRACE_S = 10.0


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class EmbeddedEngine:
    """Implements `Engine` by running `python -m trainer.engines.serving.cli serve` on this machine."""

    def __init__(self, model: str | Path, host: str = "127.0.0.1", port: int = 0,
                 served_model_name: str | None = None, max_batch_size: int = 16,
                 startup_timeout_s: float = 180.0, request_timeout_s: float = 600.0,
                 log_path: Path | None = None) -> None:
        self.model = str(model)
        self.host = host
        self.port = port or free_port(host)
        self.served_model_name = served_model_name or self.model
        self.max_batch_size = max_batch_size
        self.startup_timeout_s = startup_timeout_s
        self.request_timeout_s = request_timeout_s
        self.log_path = log_path or Path(tempfile.mkstemp(prefix="harnessrl-engine-", suffix=".log")[1])
        self._process: subprocess.Popen | None = None
        self._log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        """Server root; the OpenAI base URL is base_url + '/v1'."""
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        """The server's command line."""
        return [sys.executable, "-m", "trainer.engines.serving.cli", "serve", "--model", self.model,
                "--host", self.host, "--port", str(self.port), "--served-model-name", self.served_model_name,
                "--max-batch-size", str(self.max_batch_size)]

    def start(self) -> None:
        """Launches the server and waits for /health; the error quotes the server log on failure."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
        self._log = self.log_path.open("wb")
        self._process = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"engine exited with code {self._process.returncode} before becoming "
                                   f"healthy; its log ({self.log_path}) ends with:\n{self._log_tail()}")
            if self._healthy():
                return
            time.sleep(HEALTH_POLL_S)
        self.stop()
        raise TimeoutError(f"engine not healthy after {self.startup_timeout_s} s; raise startup_timeout_s or "
                           f"read {self.log_path}:\n{self._log_tail()}")

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.base_url}/health", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def _log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def health(self) -> dict:
        """The /health body: {status, policy_version, asleep, model}."""
        return self._call("GET", "/health")

    def _call(self, method: str, route: str, json: dict | None = None) -> dict:
        response = httpx.request(method, f"{self.base_url}{route}", json=json, timeout=self.request_timeout_s)
        if response.status_code != 200:
            raise RuntimeError(f"engine {route} answered {response.status_code}: {response.text}")
        return response.json()

    def sleep(self) -> None:
        """Waits for in-flight generation, then releases the weights."""
        self._call("POST", "/sleep")

    def wake_up(self) -> None:
        """Reloads the weights and releases waiting requests."""
        self._call("POST", "/wake_up")

    def update_weights(self, path: Path | str, version: int) -> None:
        """Loads the checkpoint at `path` between batches and sets the policy version."""
        self._call("POST", "/update_weights", {"path": str(Path(path).resolve()), "version": version})

    def stop(self) -> None:
        """Terminates the server (SIGTERM, then SIGKILL after a grace period)."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> EmbeddedEngine:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
