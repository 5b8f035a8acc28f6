"""`harnessrl model ...`: provision models into the local cache."""

from __future__ import annotations

import time

import typer

from engines.model_cache import KNOWN_MODELS, ModelProvisioningError, models_dir, prepare_model

app = typer.Typer(help="Provision models into the local cache.", no_args_is_help=True, add_completion=False)


@app.command()
def prepare(
    names: list[str] = typer.Argument(  # noqa: B008 - typer reads its defaults from the signature
        None, help=f"One or more of: {', '.join(sorted(KNOWN_MODELS))} (default smollm2-135m-instruct)."),
    models_dir_opt: str | None = typer.Option(
        None, "--models-dir",
        help="Cache directory (default $HARNESSRL_MODELS_DIR or ~/.cache/harnessrl/models)."),
) -> None:
    """Build each of NAMES into the cache (once) and print its directory, one per line."""
    for name in names or ["smollm2-135m-instruct"]:
        started_s = time.monotonic()
        try:
            path = prepare_model(name, models_dir_opt)
        except ModelProvisioningError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(code=2) from exc
        typer.echo(f"{path}", nl=True)
        typer.echo(f"prepared {name} in {time.monotonic() - started_s:.1f} s", err=True)


@app.command("list")
def list_models(
    models_dir_opt: str | None = typer.Option(None, "--models-dir", help="Cache directory to inspect."),
) -> None:
    """List the known model names and whether each is already prepared."""
    root = models_dir(models_dir_opt)
    for name, known in sorted(KNOWN_MODELS.items()):
        state = "prepared" if (root / name / "config.json").is_file() else "not prepared"
        typer.echo(f"{name:24} {state:13} {known.description}")


if __name__ == "__main__":
    app()
