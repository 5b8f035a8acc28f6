"""evaluate-swe-verified lets each task name its recipe (swe or swe_bench): its controller gets no `--recipe`."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.config import load_run_config
from flows.setup import fresh_plan, process_settings
from flows.weights import Weights
from recipes.swe.evaluation import EvaluationPlan


class Started(Exception):
    """Raised by the stand-in services once they hold the settings the flow would start."""


def test_only_a_pinned_controller_gets_the_recipe(tmp_path):
    config = load_run_config("swe-eval-local", {"work_dir": str(tmp_path)}, recipe="swe")
    plan = fresh_plan(config, "e", tmp_path / "model")
    pinned = process_settings(config, plan).controller_args
    assert pinned[pinned.index("--recipe") + 1] == "swe"
    unpinned = process_settings(config, plan, pin_recipe=False).controller_args
    assert "--recipe" not in unpinned and unpinned == pinned[:pinned.index("--recipe")]


def test_the_evaluation_controller_takes_each_task_recipe(tmp_path, monkeypatch):
    import flows.evaluate

    started = []

    def services(settings):
        started.append(settings)
        raise Started

    monkeypatch.setattr(flows.evaluate, "RunProcesses", services)
    config = load_run_config("swe-eval-local", {"work_dir": str(tmp_path)}, recipe="swe")
    weights = Weights(tmp_path / "model", 3, "harnessrl/r/step-000003", "file:///s/r/step-000003")
    with pytest.raises(Started):
        flows.evaluate.run_local(config, EvaluationPlan(local=(), not_runnable=()), weights, "e")
    (settings,) = started
    assert "--recipe" not in settings.controller_args and "--runner" in settings.controller_args
    assert (settings.run_dir, settings.model_path, settings.policy_version) == (tmp_path / "e", Path(weights.path), 3)
