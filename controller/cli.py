"""`harnessrl controller run ...`: the reconcile loop against a gateway (admin and grader tokens from the env)."""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from controller.config import ControllerConfig
    from controller.runners.harness_sandbox import HarnessSandbox

app = typer.Typer(no_args_is_help=True, add_completion=False)


@app.callback()
def controller() -> None:
    """The rollout controller."""


def _token(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise typer.BadParameter(f"${name} is not set; export the gateway's {name.split('_')[1].lower()} token "
                                 "in it (the same value the gateway was started with)")
    return value


@app.command()
def run(
    gateway: str = typer.Option(None, help="Gateway base URL, e.g. http://127.0.0.1:8100."),
    runner: str = typer.Option(None, help="local or kubernetes."),
    concurrency: int = typer.Option(None, help="Most harness attempts at once."),
    recipe: str = typer.Option(None, help="Recipe for every rollout (default: the task's 'recipe' key)."),
    config: Path = typer.Option(None, exists=True, dir_okay=False, help="YAML controller config."),
    controller_id: str = typer.Option(None, help="Lease owner name (default host-pid)."),
    harness_timeout_s: float = typer.Option(None, help="Wall-clock limit of one attempt."),
    work_dir: Path = typer.Option(None, help="Parent of the attempts' working directories."),
    logs_dir: Path = typer.Option(None, help="Parent of the attempts' stdout/stderr files."),
    until_idle: bool = typer.Option(False, help="Exit once nothing is queued or running."),
) -> None:
    """Claim queued rollouts, run their harnesses, grade them and report (HARNESSRL_ADMIN_TOKEN, _GRADER_TOKEN)."""
    from controller.config import load_controller_config
    from controller.reconcile import Reconciler
    from gateway.client import GatewayClient

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = load_controller_config(config, gateway_url=gateway, runner=runner, concurrency=concurrency, recipe=recipe,
                                 controller_id=controller_id, harness_timeout_s=harness_timeout_s,
                                 work_dir=work_dir, logs_dir=logs_dir)
    admin_token, grader_token = _token("HARNESSRL_ADMIN_TOKEN"), _token("HARNESSRL_GRADER_TOKEN")
    stop = threading.Event()
    previous = {signum: signal.signal(signum, lambda *_: stop.set()) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        with GatewayClient(cfg.gateway_url, admin_token) as admin, \
                GatewayClient(cfg.gateway_url, grader_token) as grader:
            stats = Reconciler(cfg, admin, grader, _runner(cfg, admin)).run(stop, until_idle=until_idle)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    typer.echo(f"claimed {stats.claimed}, started {stats.started}, reported {stats.reported}, lost {stats.lost}")


def _runner(cfg, admin):
    if cfg.runner == "kubernetes":
        from controller.runners.kubernetes import KubernetesRunner

        return KubernetesRunner(cfg.kubernetes, cfg.concurrency, admin)
    from controller.runners.local import LocalRunner

    return LocalRunner(cfg.concurrency, kill_grace_s=cfg.kill_grace_s, sandbox=harness_sandbox(cfg))


def harness_sandbox(cfg: ControllerConfig) -> HarnessSandbox:
    """How the LocalRunner sandboxes harnesses under `cfg` (the network switch; everything else fixed)."""
    from controller.runners.harness_sandbox import HarnessSandbox

    return HarnessSandbox(allow_network=cfg.harness_network == "host")


if __name__ == "__main__":
    app()
