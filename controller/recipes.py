"""Recipes by name: each registers under the entry-point group `harnessrl.recipes` (pyproject.toml), loaded lazily
(a recipe may need packages the others do not), so the controller never imports a recipe's package."""

from __future__ import annotations

from importlib.metadata import entry_points

from controller.recipe import Recipe

ENTRY_POINT_GROUP = "harnessrl.recipes"


def recipe_names() -> list[str]:
    """The names of every registered recipe, sorted."""
    return sorted({point.name for point in entry_points(group=ENTRY_POINT_GROUP)})


def get_recipe(name: str) -> Recipe:
    """The recipe registered as `name`. A name registered by two distributions is refused: which one grades a
    rollout must never depend on what else is installed."""
    found = {point.value: point for point in entry_points(group=ENTRY_POINT_GROUP, name=name)}
    if not found:
        raise KeyError(f"unknown recipe {name!r}; known recipes: {', '.join(recipe_names())} (a recipe registers "
                       f"under the entry-point group {ENTRY_POINT_GROUP!r} in its package's pyproject.toml)")
    if len(found) > 1:
        raise KeyError(f"recipe {name!r} is registered more than once ({', '.join(sorted(found))}); uninstall "
                       f"all but one of the distributions that register it")
    (point,) = found.values()
    return point.load()
