"""`harnessrl train`: validate the run's configuration, then run the training flow in this process (Prefect starts a
temporary server for it only once the configuration is known to be good). The configuration's modules (torch,
transformers, every component's config) are imported when the command runs, not when the console script starts, so
that `harnessrl model ...` and `--help` start in about a second."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer
import yaml
from pydantic import ValidationError

from rollouts.registry import RECIPE_PATH_ENV, recipe_names

if TYPE_CHECKING:
    from flows.config import RunConfig

PREFECT_DEFAULTS = {
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",  # 22-35 s on 2 cores; Prefect's default is 20 s
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",  # otherwise "database is locked" from telemetry
    "MLFLOW_DISABLE_TELEMETRY": "true",
}

app = typer.Typer(no_args_is_help=True, add_completion=False)


def parse_overrides(pairs: list[str]) -> dict[str, object]:
    """`key.path=value` pairs; values are YAML (numbers, booleans, lists, mappings)."""
    overrides: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"--set {pair!r}: use key.path=value, e.g. --set algorithm.iterations=5")
        overrides[key.strip()] = yaml.safe_load(value)
    return overrides


def local_profile(name: str) -> str | None:
    """The profile `NAME-local` in deploy/configs when there is one (`if` names if-local)."""
    from flows.config import PROFILES_DIR

    return f"{name}-local" if (PROFILES_DIR / f"{name}-local.yaml").is_file() else None


def resolve_run(name: str | None, recipe: str | None, recipe_file: Path | None,
                profile: str | None) -> tuple[str | None, str | None]:
    """(profile, recipe reference) for the command line: NAME is a registered recipe or the short name of a
    `NAME-local` profile; a recipe without a profile of its own trains with the defaults and its own settings."""
    given = [value for value in (name, recipe, recipe_file) if value is not None]
    if len(given) > 1:
        raise typer.BadParameter("name the recipe once: RECIPE, --recipe NAME or --recipe-file FILE")
    if recipe_file is not None:
        return profile, str(recipe_file.expanduser().resolve())
    chosen = recipe or name
    if chosen is None:
        raise typer.BadParameter(f"name a recipe: RECIPE (one of {', '.join(recipe_names())}), --recipe "
                                 "module:OBJECT or --recipe-file my_recipe.yaml")
    if chosen in recipe_names():
        return profile or local_profile(chosen), chosen
    if ":" not in chosen and (short := local_profile(chosen)) is not None:
        return profile or short, None  # the profile names the recipe
    if ":" in chosen:
        return profile, chosen
    raise typer.BadParameter(f"recipe {chosen!r}: use one of {', '.join(recipe_names())} (or the short name of a "
                             f"NAME-local profile, e.g. if), --recipe module:OBJECT or --recipe-file my_recipe.yaml")


def recipes_help() -> str:
    return f"A registered recipe ({', '.join(recipe_names())}) or a NAME-local profile's NAME (if)."


@app.command()
def train(
    name: str = typer.Argument(None, metavar="RECIPE", help=recipes_help(), show_default=False),
    recipe: str = typer.Option(None, help="The recipe: a registered name or module:OBJECT from your own folder "
                               f"(imported from here and ${RECIPE_PATH_ENV})."),
    recipe_file: Path = typer.Option(None, help="A recipe file (YAML): tasks, harness command, grader command."),
    profile: str = typer.Option(None, help="Profile name in deploy/configs or a YAML path (default: RECIPE-local "
                                "when there is one, else the defaults and the recipe's own settings)."),
    set_: list[str] = typer.Option([], "--set", help="Override a setting: key.path=value (repeatable)."),
) -> None:
    """Trains a recipe with its profile, then prints the MLflow run. The configuration is checked
    first: a bad setting or recipe stops here, before any server starts."""
    os.environ.setdefault(RECIPE_PATH_ENV, str(Path.cwd()))  # module:OBJECT recipes, here and in the controller
    chosen_profile, reference = resolve_run(name, recipe, recipe_file, profile)
    overrides = parse_overrides(set_)
    config = check_config(chosen_profile, overrides, reference)
    for key, value in PREFECT_DEFAULTS.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("PREFECT_HOME", str(Path(".prefect").resolve()))
    from flows.train import train_flow

    train_flow(chosen_profile, overrides, config.recipe)


def check_config(profile: str | None, overrides: dict[str, object], recipe: str | None) -> RunConfig:
    """The validated configuration, or the errors as a usage error (exit status 2) naming each bad key."""
    from flows.config import load_run_config

    try:
        return load_run_config(profile, overrides, recipe)
    except ValidationError as error:
        raise typer.BadParameter("\n".join(problem_lines(error))) from error
    except (ValueError, FileNotFoundError) as error:
        raise typer.BadParameter(str(error)) from error


def problem_lines(error: ValidationError) -> list[str]:
    """One line per problem: the setting's dotted key, then pydantic's message without its prefix."""
    return [f"{'.'.join(str(part) for part in item['loc']) or 'config'}: "
            f"{item['msg'].removeprefix('Value error, ')}" for item in error.errors()]
