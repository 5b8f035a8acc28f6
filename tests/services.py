"""Real service processes for tests in any folder: an MLflow tracking server and a PostgreSQL server on free ports
(with the session fixture `postgres_server`), process-state probes."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

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


REQUIRE_POSTGRES_ENV = "HARNESSRL_REQUIRE_POSTGRES"
"""Set to 1 (as CI does) to make a missing PostgreSQL server binary a test failure instead of a skip."""
POSTGRES_USER_ID = 65534
"""The unprivileged user (nobody) the server runs as when the tests run as root: postgres refuses to run as root."""


def postgres_bin_dir() -> Path | None:
    """The folder of the `postgres` and `initdb` binaries: from PATH, else the newest /usr/lib/postgresql/N/bin."""
    found = shutil.which("postgres")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parts[-3]))
    return versions[-1].parent if versions else None


@dataclass
class PostgresServer:
    """A throwaway PostgreSQL server: `initdb` into `root`, `postgres` on a free loopback port with fsync and
    synchronous commits on (an acknowledged commit is on disk), trust authentication for the user `postgres`, run as
    `POSTGRES_USER_ID` when this process is root. `create_database` gives each store a fresh database.

    Measured on 2 cores: initdb about 1.2 s (without its final sync), ready 0.2 s later.
    """

    root: Path
    bin_dir: Path
    port: int = field(default_factory=free_port)
    startup_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        self._process: subprocess.Popen | None = None
        self._databases = 0

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "postgres.log"

    def url(self, database: str = "postgres") -> str:
        """The SQLAlchemy URL of `database` on this server (psycopg 3 driver)."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> PostgresServer:
        """Initialises the cluster (first start only), launches the server, waits until it accepts connections."""
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            os.chown(self.root, POSTGRES_USER_ID, POSTGRES_USER_ID)
        if not (self.data_dir / "PG_VERSION").exists():
            subprocess.run([*self._as_user(), str(self.bin_dir / "initdb"), "-D", str(self.data_dir), "-U", "postgres",
                            "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"],
                           check=True, capture_output=True)
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [*self._as_user(), str(self.bin_dir / "postgres"), "-D", str(self.data_dir), "-p", str(self.port),
                 "-k", str(self.root), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=on",
                 "-c", "synchronous_commit=on", "-c", "max_connections=200"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_ready()
        return self

    def create_database(self, prefix: str = "store") -> str:
        """A new empty database; returns its SQLAlchemy URL."""
        import psycopg

        self._databases += 1
        name = f"{prefix}_{os.getpid()}_{self._databases}"
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        """Fast shutdown (SIGINT: clients disconnected, last checkpoint written), SIGKILL after 10 s."""
        if self._process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self._process.send_signal(signal.SIGINT)
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()
        self._process = None

    def _as_user(self) -> list[str]:
        if os.geteuid() != 0:
            return []
        return ["setpriv", f"--reuid={POSTGRES_USER_ID}", f"--regid={POSTGRES_USER_ID}", "--clear-groups"]

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(f"postgres exited with code {self._process.returncode}; its log "
                                   f"({self.log_path}) ends with:\n{self.log_path.read_text()[-3000:]}")
            try:
                psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres",
                                connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise TimeoutError(f"postgres not accepting connections after {self.startup_timeout_s} s; "
                                       f"read {self.log_path}") from None
                time.sleep(0.05)


def require_postgres_bin(bin_dir: Path | None, env: Mapping[str, str]) -> Path:
    """`bin_dir` when there is one; else the test is skipped, saying what to install, or fails when
    `env[REQUIRE_POSTGRES_ENV]` is 1."""
    if bin_dir is not None:
        return bin_dir
    message = ("no PostgreSQL server binary (postgres, initdb) on PATH or under /usr/lib/postgresql: "
               "install the Debian package postgresql")
    if env.get(REQUIRE_POSTGRES_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_POSTGRES_ENV}=1)")
    pytest.skip(f"{message}, or set {REQUIRE_POSTGRES_ENV}=1 to make this a failure")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the test session (per xdist worker). Skipped, saying so, when no server binary
    is installed, unless $HARNESSRL_REQUIRE_POSTGRES=1 (then a failure that names the package to install)."""
    bin_dir = require_postgres_bin(postgres_bin_dir(), os.environ)
    root = Path(tempfile.mkdtemp(prefix="harnessrl-pg-"))
    server = PostgresServer(root, bin_dir).start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
