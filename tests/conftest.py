"""Session fixtures shared by every test folder: the tiny model, an embedded engine serving it, a moto S3 server,
a temporary Prefect server."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.cpu_time import CpuTimeReport
from tests.file_order import costliest_first, work_unit
from tests.services import MLFLOW_QUIET_ENV, MlflowServerProcess

TINY_SERVED_NAME = "tiny"

# One torch thread per process: the suite runs two workers beside engine, gateway and harness processes on a small
# machine, where torch's default (a thread per core) spin-waits in every parallel region for threads that are not
# running. Measured on the 2-core machine beside a training run: four short SmolLM2 chat answers took the engine 77
# CPU-s with two threads and 4.3 with one (tests/README.md "Timings"). Set before torch is imported (the workers'
# own torch and, inherited, every process a test starts); a value set outside the suite is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Property tests judge correctness, not speed: on a loaded 2-core machine (two xdist workers beside server processes)
# one draw can stall for seconds, which Hypothesis's default health check and deadline report as failures.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

INTEGRATION_FIXTURES = {
    "embedded_engine": "an engine server process with the tiny model",
    "reference_model": "the tiny model's weights loaded in the test process",
    "tiny_model_dir": "the tiny model's weights (a test that asks for the folder loads or serves them)",
    "prefect_api": "a Prefect server process",
    "postgres_server": "a PostgreSQL server process",
    "mlflow_server": "an MLflow server process",
}
"""Fixtures that make a test an integration test: any test using one (directly or through another fixture) is
marked `slow` at collection, so `make test-fast` (-m "not slow") leaves it out without a marker per test."""
E2E_FIXTURES = {"prefect_api": "runs a flow on a Prefect server"}
"""Fixtures that make a test end to end: any test using one is marked `e2e` (and `slow`) at collection, so `make test`
(-m "not e2e") starts no Prefect server; `make test-e2e` and CI run them."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-json", type=Path, default=None, metavar="FILE",
                     help="write every test's CPU seconds to FILE (tests/cpu_time.py)")


def pytest_configure(config: pytest.Config) -> None:
    """Every run ends with the CPU seconds of its costliest test files (tests/cpu_time.py)."""
    config.pluginmanager.register(CpuTimeReport(config.getoption("cpu_json")), "harnessrl-cpu-time")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks `e2e` every test that uses an end-to-end fixture, `slow` every test that uses an integration fixture or
    is `e2e`; the costliest files first (tests/file_order.py)."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if E2E_FIXTURES.keys() & fixtures:
            item.add_marker(pytest.mark.e2e)
        if INTEGRATION_FIXTURES.keys() & fixtures or item.get_closest_marker("e2e"):
            item.add_marker(pytest.mark.slow)
    items[:] = costliest_first(items)


def shared_fixture_scheduling() -> type:
    """xdist's `--dist loadfile` with the files of a shared server fixture as one work unit (tests/file_order.py).
    Imported here, not at the top: the verl venv's run (`make test-verl`) has no xdist."""
    from xdist.scheduler import LoadFileScheduling

    class SharedFixtureScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return SharedFixtureScheduling


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`make test`'s `--dist loadfile` groups a shared fixture's files; any other mode is xdist's own."""
    return shared_fixture_scheduling()(config, log) if config.getvalue("dist") == "loadfile" else None


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServerProcess]:
    """`mlflow server` with a sqlite backend and proxied local artifacts; its tracking URI is `.url`. One a worker:
    the files using it run on one worker (tests/file_order.py SHARED_FIXTURE_FILES); each test makes its own
    experiment."""
    for name, value in MLFLOW_QUIET_ENV.items():
        os.environ.setdefault(name, value)
    server = MlflowServerProcess(tmp_path_factory.mktemp("mlflow-server")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The tiny random Llama, prepared once into the provisioning cache ($HARNESSRL_MODELS_DIR)."""
    from engines.model_cache import prepare_model

    return prepare_model("tiny")


@pytest.fixture(scope="session")
def embedded_engine(tiny_model_dir: Path) -> Iterator[object]:
    """A real engine server subprocess serving the tiny model as `tiny` on a free port."""
    from engines.embedded import EmbeddedEngine

    engine = EmbeddedEngine(tiny_model_dir, served_model_name=TINY_SERVED_NAME, max_batch_size=16)
    engine.start()
    yield engine
    engine.stop()


@pytest.fixture(scope="session")
def engine_url(embedded_engine) -> str:
    """Root URL of the running engine (its OpenAI base URL is engine_url + '/v1')."""
    return embedded_engine.base_url


@pytest.fixture(scope="session")
def s3_endpoint():
    """A moto S3 server (the S3 REST API) in this process on a free port; returns its S3Endpoint."""
    from moto.server import ThreadedMotoServer

    from storage.s3_store import S3Endpoint

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield S3Endpoint(f"127.0.0.1:{port}", access_key="test", secret_key="test", secure=False)
    server.stop()


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory) -> Iterator[None]:
    """Runs flows against a temporary Prefect server (started once; about 30 s on 2 cores)."""
    home = tmp_path_factory.mktemp("prefect-home")
    os.environ.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false",
                      PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="120")
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
