"""Recipes by reference, loaded lazily (a recipe may need packages the others do not), so that neither the controller
nor the training loop ever imports a recipe's package by name. A reference is one of:

- `NAME`: registered under the entry-point group `harnessrl.recipes` (the project's own in pyproject.toml; a
  third-party package registers in its own pyproject.toml and gets everything a built-in recipe gets);
- `PATH.yaml` (or `.yml`): a recipe file, read by the loader registered for its suffix under
  `harnessrl.recipe_loaders` (the project's: `recipes.file_recipe`);
- `MODULE:OBJECT`: an object of a module imported from the user's own folders, with no install: the folders of
  `$HARNESSRL_RECIPE_PATH` (os.pathsep-separated; `harnessrl train` sets it to the folder it runs in), then the
  interpreter's path. The controller and the flow load it alike (the controller inherits the variable).
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from importlib.metadata import entry_points
from pathlib import Path

from rollouts.recipe import Recipe

ENTRY_POINT_GROUP = "harnessrl.recipes"
LOADER_GROUP = "harnessrl.recipe_loaders"
RECIPE_PATH_ENV = "HARNESSRL_RECIPE_PATH"
FILE_SUFFIXES = (".yaml", ".yml")

_loaded: dict[str, Recipe] = {}
_lock = threading.Lock()


class RecipeReferenceError(KeyError):
    """A reference that names no loadable recipe; the message names the reference and the fix."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def recipe_names() -> list[str]:
    """The names of every registered recipe, sorted."""
    return sorted({point.name for point in entry_points(group=ENTRY_POINT_GROUP)})


def is_file_reference(reference: str) -> bool:
    """Whether `reference` names a recipe file (by its suffix)."""
    return reference.lower().endswith(FILE_SUFFIXES)


def is_object_reference(reference: str) -> bool:
    """Whether `reference` is `MODULE:OBJECT`."""
    module, sep, name = reference.partition(":")
    return bool(sep and module and name) and not is_file_reference(reference)


def get_recipe(reference: str) -> Recipe:
    """The recipe `reference` names (see the module docstring), loaded once per process. A name registered by two
    distributions is refused: which one grades a rollout must never depend on what else is installed. A recipe file
    is read once per process (a run grades every rollout by the file as it was when the run started)."""
    if is_file_reference(reference):
        with _lock:
            if reference not in _loaded:
                _loaded[reference] = _load_file(Path(reference))
            return _loaded[reference]
    if is_object_reference(reference):
        return _load_object(reference)
    return _load_registered(reference)


def _load_registered(name: str) -> Recipe:
    found = {point.value: point for point in entry_points(group=ENTRY_POINT_GROUP, name=name)}
    if not found:
        raise RecipeReferenceError(
            f"unknown recipe {name!r}; known recipes: {', '.join(recipe_names())} (a recipe registers under the "
            f"entry-point group {ENTRY_POINT_GROUP!r} in its package's pyproject.toml; or name a recipe file "
            "(my_recipe.yaml) or an object of your own module (my_module:RECIPE))")
    if len(found) > 1:
        raise RecipeReferenceError(f"recipe {name!r} is registered more than once ({', '.join(sorted(found))}); "
                                   "uninstall all but one of the distributions that register it")
    (point,) = found.values()
    return point.load()


def _load_file(path: Path) -> Recipe:
    if not path.is_file():
        raise RecipeReferenceError(f"recipe file {str(path)!r} does not exist; give the path of your recipe YAML")
    suffix = path.suffix.lower().lstrip(".")
    loaders = {point.name: point for point in entry_points(group=LOADER_GROUP)}
    loader = loaders.get(suffix) or loaders.get("yaml")
    if loader is None:
        raise RecipeReferenceError(f"no recipe loader for {path.name!r}: nothing is registered under the "
                                   f"entry-point group {LOADER_GROUP!r}; reinstall harnessrl (pip install -e .)")
    return loader.load()(path.resolve())


def recipe_path() -> list[str]:
    """The folders `MODULE:OBJECT` recipes are imported from first ($HARNESSRL_RECIPE_PATH)."""
    return [entry for entry in os.environ.get(RECIPE_PATH_ENV, "").split(os.pathsep) if entry]


def _load_object(reference: str) -> Recipe:
    module_name, _, object_name = reference.partition(":")
    for folder in reversed(recipe_path()):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise RecipeReferenceError(
            f"recipe {reference!r}: module {module_name!r} cannot be imported ({error}); run from the folder that "
            f"holds {module_name.replace('.', '/')}.py or add that folder to ${RECIPE_PATH_ENV}") from error
    recipe = module
    for part in object_name.split("."):
        if not hasattr(recipe, part):
            raise RecipeReferenceError(f"recipe {reference!r}: module {module_name!r} has no {object_name!r}; name "
                                       "the recipe object (an instance of a class implementing rollouts.recipe."
                                       "Recipe) after the colon")
        recipe = getattr(recipe, part)
    missing = [name for name in ("name", "generate", "harness_command", "prepare_workdir", "grade")
               if not hasattr(recipe, name)]
    if missing:
        raise RecipeReferenceError(f"recipe {reference!r} is not a recipe: it lacks {', '.join(missing)} "
                                   "(see rollouts/recipe.py's Recipe protocol)")
    return recipe  # type: ignore[return-value]
