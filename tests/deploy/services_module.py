"""deploy/services.py as a module for the tests (deploy/ holds scripts, it is not a package): `services`."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.deploy.support import REPO


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("harnessrl_services", REPO / "deploy" / "services.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


services = _load()
