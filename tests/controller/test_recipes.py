"""controller/recipes.py: recipes by registered name, unknown and ambiguous names refused with the fix."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

import controller.recipes as recipes
from agents.instruction_following.recipe import RECIPE as IF_RECIPE


def test_the_projects_recipes_are_registered_by_name() -> None:
    assert recipes.recipe_names() == ["calculator", "claude-code", "codex", "instruction_following", "multistep",
                                     "search", "swe", "swe_bench"]
    assert recipes.get_recipe("instruction_following") is IF_RECIPE


def test_an_unknown_name_lists_the_known_ones() -> None:
    known = "calculator, claude-code, codex, instruction_following, multistep, search"
    with pytest.raises(KeyError, match=f"unknown recipe 'nope'; known recipes: {known}"):
        recipes.get_recipe("nope")


def test_a_name_registered_twice_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    points = [EntryPoint("swe", "agents.swe.recipe:RECIPE", recipes.ENTRY_POINT_GROUP),
              EntryPoint("swe", "somebody_else.recipe:RECIPE", recipes.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(recipes, "entry_points",
                        lambda group, name=None: [p for p in points if name is None or p.name == name])
    with pytest.raises(KeyError, match="registered more than once"):
        recipes.get_recipe("swe")
