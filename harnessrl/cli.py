"""The `harnessrl` console script: one typer app, one sub-app per component."""

from __future__ import annotations

import typer

from controller.cli import app as controller_app
from engines.serving.cli import app as engine_app
from flows.cli import train as train_command
from gateway.cli import app as gateway_app
from harnessrl.model_cli import app as model_app

app = typer.Typer(help="harnessrl: reinforcement learning of LLM agents through their own harness.",
                  no_args_is_help=True, add_completion=False)
app.add_typer(model_app, name="model", help="Provision models into the local cache.")
app.add_typer(engine_app, name="engine", help="The embedded CPU inference engine.")
app.add_typer(gateway_app, name="gateway", help="The API gateway and rollout store.")
app.add_typer(controller_app, name="controller", help="The rollout controller.")
app.command("train")(train_command)

if __name__ == "__main__":
    app()
