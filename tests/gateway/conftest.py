"""Fixtures for gateway tests: a scripted upstream and a gateway in front of it, both served in-process.

The gateway's store is parametrized: tests through `gateway` (or `admin`) run on SQLite (fast tier), and those of
the modules in `STORE_CONTRACT_MODULES` also on a real PostgreSQL server (`tests/services.postgres_server`, slow
tier), so what the store keeps and refuses is checked on both.
"""

from __future__ import annotations

import time

import pytest

from gateway.client import GatewayAPIError, GatewayClient
from gateway.scripted import Script
from tests.gateway.support import ADMIN_TOKEN, GRADER_TOKEN
from tests.inprocess import InProcessGateway, InProcessScripted
from tests.services import postgres_server  # noqa: F401  (session fixture used by store_url)

STORE_CONTRACT_MODULES = frozenset({"test_rollouts_api", "test_bad_input", "test_fencing", "test_choices_and_side",
                                    "test_late_calls"})
"""Test modules whose assertions are about what the store keeps, refuses and returns: run on PostgreSQL too (each
PostgreSQL variant costs about as much as its SQLite one)."""
POSTGRES = pytest.param("postgres", marks=pytest.mark.slow)
"""PostgreSQL starts a server process, so its variants are in the slow tier."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test using `store_url` gets SQLite; a store-contract module's tests get PostgreSQL too."""
    if "store_url" in metafunc.fixturenames:
        contract = metafunc.module.__name__.rsplit(".", 1)[-1] in STORE_CONTRACT_MODULES
        metafunc.parametrize("store_url", ["sqlite", POSTGRES] if contract else ["sqlite"], indirect=True,
                             scope="module")


@pytest.fixture(scope="module")
def store_url(request, tmp_path_factory) -> str:
    """A fresh, empty store: a SQLite file, or a new database on the session's PostgreSQL server."""
    if request.param == "postgres":
        return request.getfixturevalue("postgres_server").create_database()
    return f"sqlite:///{tmp_path_factory.mktemp('gw') / 'store.db'}"


@pytest.fixture(scope="module")
def scripted():
    upstream = InProcessScripted(Script(prompt_tokens=16, response_tokens=8)).start()
    yield upstream
    upstream.stop()


def register_retrying_busy(admin: GatewayClient, base_url: str, attempts: int = 5) -> None:
    """Registers the scripted upstream, retrying the gateway's 503 store_unavailable as it advises (a busy database
    under load: a PostgreSQL store once stayed locked past the write's 0.75 s budget at module set-up)."""
    for attempt in range(attempts):
        try:
            admin.register_model("policy", base_url, version=3)
            return
        except GatewayAPIError as error:
            if error.status != 503 or attempt == attempts - 1:
                raise
            time.sleep(1.0)


@pytest.fixture(scope="module")
def gateway(store_url, scripted):
    gw = InProcessGateway(db_url=store_url).start()
    with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
        register_retrying_busy(admin, scripted.base_url)
    yield gw
    gw.stop()


@pytest.fixture
def admin(gateway):
    with GatewayClient(gateway.url, ADMIN_TOKEN) as client:
        yield client


@pytest.fixture
def grader(gateway):
    with GatewayClient(gateway.url, GRADER_TOKEN) as client:
        yield client
