"""`harnessrl train RECIPE`: run a training flow in this process (Prefect starts a temporary server for it)."""

from __future__ import annotations

import os
from pathlib import Path

import typer
import yaml

RECIPE_FLOWS = {"swe": "train_swe", "if": "train_if", "search": "train_search", "calculator": "train_calculator"}
DEFAULT_PROFILES = {"swe": "swe-local", "if": "if-local", "search": "search-local", "calculator": "calculator-local"}
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


@app.command()
def train(
    recipe: str = typer.Argument("swe", help="swe, if, search or calculator."),
    profile: str = typer.Option(None, help="Profile name in deploy/configs or a YAML path (default: RECIPE-local)."),
    set_: list[str] = typer.Option([], "--set", help="Override a setting: key.path=value (repeatable)."),
) -> None:
    """Trains RECIPE with the embedded default (or the given profile), then prints the MLflow run."""
    if recipe not in RECIPE_FLOWS:
        raise typer.BadParameter(f"recipe {recipe!r}: use one of {', '.join(RECIPE_FLOWS)}")
    for key, value in PREFECT_DEFAULTS.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("PREFECT_HOME", str(Path(".prefect").resolve()))
    from flows import train as flows_train

    flow = getattr(flows_train, RECIPE_FLOWS[recipe])
    flow(profile or DEFAULT_PROFILES[recipe], parse_overrides(set_))
