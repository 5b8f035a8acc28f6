"""A real MLflow tracking server for the tracking tests (session scope: one start for the folder)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.services import MLFLOW_QUIET_ENV, MlflowServerProcess

for _name, _value in MLFLOW_QUIET_ENV.items():
    os.environ.setdefault(_name, _value)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServerProcess]:
    """`mlflow server` with a sqlite backend and proxied local artifacts; its tracking URI is `.url`."""
    server = MlflowServerProcess(tmp_path_factory.mktemp("mlflow-server")).start()
    yield server
    server.stop()
