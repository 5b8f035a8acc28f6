"""rollouts/registry.py: recipes by reference (registered name, module:OBJECT from the user's folder), unknown and
ambiguous names refused with the fix; rollouts/recipe.py: a recipe's optional hooks and their defaults."""

from __future__ import annotations

from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

import rollouts.registry as registry
from recipes.instruction_following.recipe import RECIPE as IF_RECIPE
from rollouts.recipe import DEFAULT_NO_SIGNAL_HINT, recipe_hooks

BUILT_IN = ["calculator", "claude-code", "codex", "instruction_following", "multistep", "search", "swe", "swe_bench"]


def test_the_projects_recipes_are_registered_by_name() -> None:
    assert set(BUILT_IN) <= set(registry.recipe_names())  # a third-party package may add its own
    assert registry.get_recipe("instruction_following") is IF_RECIPE


def test_an_unknown_name_lists_the_known_ones() -> None:
    known = "calculator, claude-code, codex, instruction_following, multistep, search"
    with pytest.raises(KeyError, match=f"unknown recipe 'nope'; known recipes: {known}"):
        registry.get_recipe("nope")


def test_a_name_registered_twice_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    points = [EntryPoint("swe", "recipes.swe.recipe:RECIPE", registry.ENTRY_POINT_GROUP),
              EntryPoint("swe", "somebody_else.recipe:RECIPE", registry.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(registry, "entry_points",
                        lambda group, name=None: [p for p in points if name is None or p.name == name])
    with pytest.raises(KeyError, match="registered more than once"):
        registry.get_recipe("swe")


RECIPE_MODULE = '''
class Mine:
    name = "mine"
    def generate(self, count, seed): return [{"id": f"t{i}"} for i in range(count)]
    def harness_command(self): return ["/bin/true"]
    def prepare_workdir(self, task, workdir): pass
    def grade(self, graded): raise NotImplementedError

RECIPE = Mine()
NOT_A_RECIPE = object()
'''


def test_module_object_loads_from_the_recipe_path_without_an_install(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_recipe_mod.py").write_text(RECIPE_MODULE)
    monkeypatch.setenv(registry.RECIPE_PATH_ENV, str(tmp_path))
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    recipe = registry.get_recipe("my_recipe_mod:RECIPE")
    assert recipe.name == "mine" and recipe.generate(2, 0) == [{"id": "t0"}, {"id": "t1"}]
    with pytest.raises(KeyError, match="lacks name, generate, harness_command, prepare_workdir, grade"):
        registry.get_recipe("my_recipe_mod:NOT_A_RECIPE")
    with pytest.raises(KeyError, match="has no 'NOPE'"):
        registry.get_recipe("my_recipe_mod:NOPE")
    with pytest.raises(KeyError, match="module 'no_such_module_here' cannot be imported"):
        registry.get_recipe("no_such_module_here:RECIPE")


def test_a_recipe_file_that_does_not_exist_is_named(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="recipe file .*missing.yaml' does not exist"):
        registry.get_recipe(str(tmp_path / "missing.yaml"))


def test_a_recipe_without_hooks_gets_the_defaults() -> None:
    class Bare:
        name = "bare"

    hooks = recipe_hooks(Bare())
    assert hooks.rollout_metrics([], 1.0, "rollout") == {} and hooks.shaping_shares is None
    assert hooks.no_signal_hint == DEFAULT_NO_SIGNAL_HINT and hooks.metrics_read_calls is False
    assert hooks.recorded_turns is False


def test_the_swe_recipe_brings_its_metrics_shaping_and_hint_through_hooks() -> None:
    hooks = recipe_hooks(registry.get_recipe("swe"))
    assert hooks.shaping_shares is not None and hooks.metrics_read_calls and "7B-class" in hooks.no_signal_hint
    assert recipe_hooks(registry.get_recipe("claude-code")).shaping_shares is None  # no mini-swe-agent format
    assert recipe_hooks(registry.get_recipe("codex")).recorded_turns and not hooks.recorded_turns
