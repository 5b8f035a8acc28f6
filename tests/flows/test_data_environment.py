"""prepare-swe-data refuses an environment its probes cannot run in before loading anything, and closes the
environment backend it cleaned with."""

from __future__ import annotations

import pytest

import flows.swe_data
from flows.swe_data import DataParams, clean, prepare_swe_data


def fail(what: str):
    def called(*args, **kwargs):
        raise AssertionError(f"{what} was called for an environment the probes cannot run in")

    return called


def test_registry_probes_are_refused_before_any_row_is_loaded(monkeypatch):
    monkeypatch.setattr(flows.swe_data, "load_swe_rows", fail("load_swe_rows"))
    monkeypatch.setattr(flows.swe_data, "resolve_weights", fail("resolve_weights"))
    monkeypatch.setattr(flows.swe_data, "environment_backend", fail("environment_backend"))
    with pytest.raises(ValueError, match=r"environment='registry': the tasks need registry images.*"
                                         r"environment='local'"):
        prepare_swe_data.fn(environment="registry", model="tiny")
    with pytest.raises(ValueError, match=r"environment='cloud': use 'local'"):
        prepare_swe_data.fn(environment="cloud", model="tiny")


class Backend:
    """An environment backend holding connections: every environment present, or the check fails."""

    def __init__(self, broken: bool = False) -> None:
        self.broken, self.closed, self.last_reasons = broken, False, {}

    def available(self, instances):
        if self.broken:
            raise RuntimeError("registry unreachable")
        return {instance["instance_id"]: True for instance in instances}

    def close(self) -> None:
        self.closed = True


def test_the_environment_backend_is_closed_after_cleaning(monkeypatch, tmp_path):
    params = DataParams("generated", "swe-smith", None, None, 1, 1, 1, 2, 0, 1.0, 200, "registry", "http://r",
                        tmp_path, "file://x")
    rows = [{"instance_id": "a", "problem_statement": "broken", "FAIL_TO_PASS": ["t::a"], "PASS_TO_PASS": []}]
    for step in ("clean_empty_statements", "clean_missing_environment", "clean_too_many_tests"):
        monkeypatch.setattr(flows.swe_data, step, getattr(flows.swe_data, step).fn)  # steps, no Prefect server
    for backend in (Backend(), Backend(broken=True)):
        monkeypatch.setattr(flows.swe_data, "environment_backend", lambda _params, backend=backend: backend)
        if backend.broken:
            with pytest.raises(RuntimeError, match="registry unreachable"):
                clean(rows, params)
        else:
            assert [step.kept for step in clean(rows, params)][-1] == rows
        assert backend.closed
