"""Real service processes for tests in any folder: an MLflow tracking server on a free port, process-state probes."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from engines.server_process import ServerProcess, free_port

MLFLOW_QUIET_ENV = {
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
}
"""No telemetry, no model-cost-map fetch (the server imports litellm), no job-runner subprocess."""


@dataclass
class MlflowServerProcess:
    """`mlflow server` on a free port: sqlite backend and proxied artifacts under `root`, restartable on the same DB
    (its log is appended to). `mlflow server` runs uvicorn as a child: stop() ends the whole process group.

    Measured on 2 cores: healthy after about 9 s on a fresh database, 5 s on an existing one.
    """

    root: Path
    port: int = field(default_factory=free_port)
    startup_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        self._server = ServerProcess("mlflow server", self.url, self.log_path)

    @property
    def url(self) -> str:
        """The tracking URI clients use."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.root / "mlflow-server.log"

    def start(self) -> MlflowServerProcess:
        """Launches the server and waits for /health; the error quotes the server log."""
        self.root.mkdir(parents=True, exist_ok=True)
        mlflow_bin = Path(sys.executable).parent / "mlflow"
        command = [str(mlflow_bin), "server", "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
                   "--artifacts-destination", str(self.root / "artifacts"),
                   "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"]
        self._server.start(command, {**os.environ, **MLFLOW_QUIET_ENV}, self.startup_timeout_s)
        return self

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL to what is left after the grace period."""
        self._server.stop()


def process_gone(pid: int, within_s: float = 2.0) -> bool:
    """True once `pid` has exited, waiting up to `within_s` (a killed process exits when next scheduled, which takes a
    moment on a loaded machine); a zombie waiting for init to reap it counts as gone (Linux /proc)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def wait_for_file(path: Path, timeout_s: float = 10.0) -> str:
    """The stripped text of `path` once a process has written it (a pid file, a marker)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise TimeoutError(f"{path} not written within {timeout_s} s")
