"""Recipes by name, imported lazily (a recipe may need packages the others do not)."""

from __future__ import annotations

import importlib

from agents.recipe import Recipe

RECIPE_MODULES = {
    "instruction_following": "agents.instruction_following.recipe",
    "search": "agents.search.recipe",
    "swe": "agents.swe.recipe",
    "swe_bench": "agents.swe_bench.recipe",
}


def get_recipe(name: str) -> Recipe:
    """The recipe called `name` (its module exposes `RECIPE`)."""
    if name not in RECIPE_MODULES:
        raise KeyError(f"unknown recipe {name!r}; known recipes: {', '.join(sorted(RECIPE_MODULES))}")
    return importlib.import_module(RECIPE_MODULES[name]).RECIPE
