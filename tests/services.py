"""Real service processes for tests in any folder: an MLflow tracking server on a free port."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.gateway.support import free_port, wait_healthy

MLFLOW_QUIET_ENV = {
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
}
"""No telemetry, no model-cost-map fetch (the server imports litellm), no job-runner subprocess."""


@dataclass
class MlflowServerProcess:
    """`mlflow server` on a free port: sqlite backend and proxied artifacts under `root`, restartable on the same DB.

    Measured on 2 cores: healthy after about 9 s on a fresh database, 5 s on an existing one.
    """

    root: Path
    port: int = field(default_factory=free_port)
    artifacts_destination: str | None = None
    """Where the server stores artifacts (default `root/artifacts`; an s3:// URI works with extra_env)."""
    extra_env: dict[str, str] = field(default_factory=dict)
    startup_timeout_s: float = 120.0
    proc: subprocess.Popen | None = None
    startup_s: float | None = None
    """Seconds the last start took to become healthy."""

    @property
    def url(self) -> str:
        """The tracking URI clients use."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.root / "mlflow-server.log"

    def start(self) -> MlflowServerProcess:
        self.root.mkdir(parents=True, exist_ok=True)
        mlflow_bin = Path(sys.executable).parent / "mlflow"
        cmd = [str(mlflow_bin), "server", "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
               "--artifacts-destination", self.artifacts_destination or str(self.root / "artifacts"),
               "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"]
        env = {**os.environ, **MLFLOW_QUIET_ENV, **self.extra_env}
        started = time.monotonic()
        with open(self.log_path, "ab") as log:
            # Its own session: `mlflow server` runs uvicorn as a child; stop() signals the whole group.
            self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_healthy(self.url + "/health", self.proc, timeout_s=self.startup_timeout_s)
        except (RuntimeError, TimeoutError) as error:
            self.stop()
            tail = self.log_path.read_text(errors="replace")[-4000:]
            raise RuntimeError(f"mlflow server did not become healthy: {error}\n--- {self.log_path} ---\n{tail}") \
                from error
        self.startup_s = time.monotonic() - started
        return self

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM to the server's process group, SIGKILL after `timeout_s`."""
        if self.proc is None:
            return
        deadline = time.monotonic() + timeout_s
        _signal_group(self.proc.pid, signal.SIGTERM)
        while _group_alive(self.proc.pid) and time.monotonic() < deadline:
            self.proc.poll()  # reap the leader so the group can empty
            time.sleep(0.1)
        if _group_alive(self.proc.pid):
            _signal_group(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=timeout_s)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    """True while a process of group `pgid` exists (a zombie leader not yet reaped counts)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
