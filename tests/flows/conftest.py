"""Prefect for flow tests: a temporary Prefect server for the session (PREFECT_HOME in a temporary folder)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory) -> Iterator[None]:
    """Runs flows against a temporary Prefect server (started once; about 30 s on 2 cores)."""
    home = tmp_path_factory.mktemp("prefect-home")
    os.environ.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false",
                      PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="120")
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
