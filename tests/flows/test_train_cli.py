"""`harnessrl train`: every registered recipe is listed and accepted; a bad configuration stops before any server
starts (the flow is never called), naming the bad key or recipe."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import flows.train
from harnessrl.cli import app
from rollouts.registry import recipe_names


def plain(output: str) -> str:
    """The output's words, rich's box characters left out."""
    return " ".join(output.replace("│", " ").split())


@pytest.fixture
def flow_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """The train flow replaced by a recorder: nothing starts (no Prefect server, no process)."""
    calls: list[tuple] = []
    monkeypatch.setattr(flows.train, "train_flow", lambda *args: calls.append(args))
    return calls


def test_help_lists_every_registered_recipe():
    result = CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0
    text = plain(result.output)
    for name in recipe_names():
        assert name in text, name
    assert "--recipe-file" in text


@pytest.mark.parametrize(("args", "profile", "recipe"), [
    (["calculator"], "calculator-local", "calculator"),
    (["--recipe", "multistep"], None, "multistep"),  # no multistep-local profile: the defaults
    (["if"], "if-local", "instruction_following"),  # the short name of a profile
    (["--recipe", "swe_bench", "--profile", "swe-eval-local"], "swe-eval-local", None),
])
def test_any_registered_recipe_is_accepted(flow_calls, args, profile, recipe):
    result = CliRunner().invoke(app, ["train", *args, "--set", "algorithm.iterations=1"])
    if recipe is None:  # swe-eval-local names swe: refused before anything starts
        assert result.exit_code == 2 and "is for recipe 'swe', not 'swe_bench'" in plain(result.output)
        assert flow_calls == []
        return
    assert result.exit_code == 0, result.output
    assert flow_calls == [(profile, {"algorithm.iterations": 1}, recipe)]


@pytest.mark.parametrize(("args", "named"), [
    (["if", "--set", "rollout.group_siz=3"], "unknown key 'group_siz' in section 'rollout'"),
    (["if", "--set", "rollout.group_size=0"], "rollout.group_size"),
    (["--recipe", "chess"], "recipe 'chess': use one of"),
    (["--recipe", "nomodule_here:RECIPE"], "module 'nomodule_here' cannot be imported"),
    (["--recipe-file", "/nonexistent/recipe.yaml"], "recipe file '/nonexistent/recipe.yaml' does not exist"),
    (["if", "--recipe", "search"], "name the recipe once"),
    ([], "name a recipe: RECIPE (one of calculator,"),
])
def test_a_bad_configuration_stops_before_any_server_naming_the_fault(flow_calls, args, named):
    result = CliRunner().invoke(app, ["train", *args])
    assert result.exit_code == 2, result.output
    assert named in plain(result.output)
    assert flow_calls == []


def test_the_console_script_starts_without_the_training_stack():
    # `make train` runs `harnessrl model prepare` before training, and every `--help` starts the script: importing it
    # must not pull in torch, transformers, Prefect or the run configuration (5.6 s against 1 s here).
    import subprocess
    import sys

    heavy = ("torch", "transformers", "prefect", "flows.config", "mlflow")
    code = f"import sys, harnessrl.cli; print([m for m in {heavy!r} if m in sys.modules])"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]", f"importing harnessrl.cli loaded {loaded}"
