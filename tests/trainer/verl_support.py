"""verl for the tests that compare against it: skipped where verl is absent, a failure where it is required."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

REQUIRE_VERL_ENV = "HARNESSRL_REQUIRE_VERL"


def verl_required() -> bool:
    """True when $HARNESSRL_REQUIRE_VERL is 1 (set by `make test-verl`, so these tests cannot silently skip)."""
    return os.environ.get(REQUIRE_VERL_ENV, "") == "1"


def require_verl(module: str) -> ModuleType:
    """Import `module` (verl or one of its dependencies); skip the test without it, unless verl is required."""
    if not verl_required():
        return pytest.importorskip(module)
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"{REQUIRE_VERL_ENV}=1 but {module!r} does not import ({error}); "
            "build the verl venv with `make verl-venv` and run these tests with .venv-verl/bin/python"
        ) from error
