"""`harnessrl gateway ...`: run the gateway server."""

from __future__ import annotations

import contextlib
from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False)


@app.callback()
def gateway() -> None:
    """The API gateway and rollout store."""


@app.command()
def serve(
    host: str = typer.Option(None, help="Listen address (default 127.0.0.1)."),
    port: int = typer.Option(None, help="Listen port (default 8100)."),
    db: str = typer.Option(None, "--db", help="Store URL, e.g. sqlite:///gateway.db or postgresql+psycopg://..."),
    config: Path = typer.Option(None, exists=True, dir_okay=False, help="YAML gateway config."),
    public_url: str = typer.Option(None, help="Base URL harnesses use to reach this gateway."),
) -> None:
    """Serve the OpenAI-compatible proxy and the admin API (admin token from HARNESSRL_ADMIN_TOKEN)."""
    from uvicorn.main import STARTUP_FAILURE

    from gateway.app import create_app
    from gateway.config import load_gateway_config
    from gateway.connection_limits import raise_descriptor_limit
    from gateway.heap import settle
    from gateway.server import GatewayServer, server_config

    cfg = load_gateway_config(config, host=host, port=port, db_url=db, public_url=public_url)
    raise_descriptor_limit()  # connections are descriptors: as many as the hard limit allows
    asgi_app = create_app(cfg)
    settle()  # what start-up built is never garbage: kept out of the collector's scans (gateway/heap.py)
    server = GatewayServer(server_config(asgi_app, cfg.host, cfg.port), asgi_app)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C, re-raised by uvicorn once it has stopped
        server.run()
    if not server.started:  # it could not start (the port taken, the store unreachable): as uvicorn.run exits
        raise SystemExit(STARTUP_FAILURE)


if __name__ == "__main__":
    app()
