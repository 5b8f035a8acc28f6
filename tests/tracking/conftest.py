"""The tracking tests' MLflow clients run quiet (no telemetry, no model-cost-map fetch); their server is the session
fixture `mlflow_server` of tests/conftest.py."""

from __future__ import annotations

import os

from tests.services import MLFLOW_QUIET_ENV

for _name, _value in MLFLOW_QUIET_ENV.items():
    os.environ.setdefault(_name, _value)
