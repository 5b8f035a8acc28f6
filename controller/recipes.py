"""Recipes by reference, as the controller loads them: `rollouts.registry` holds the registry (re-exported here)."""

from __future__ import annotations

from rollouts.registry import ENTRY_POINT_GROUP, RecipeReferenceError, get_recipe, recipe_names

__all__ = ["ENTRY_POINT_GROUP", "RecipeReferenceError", "get_recipe", "recipe_names"]
