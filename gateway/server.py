"""The gateway's HTTP server: uvicorn's, except that a stop first answers the long-polls in flight.

uvicorn stops gracefully: it waits until every request in flight has its answer. A finished-feed long-poll
(`GET /v1/admin/rollouts/finished?wait_s=...`, up to 300 s) would hold a stopping gateway that long (measured: a
SIGTERM with a 30 s poll in flight took 29 s to exit), and a Kubernetes pod past its grace period is killed with its
connections. `GatewayServer` tells the app to stop waiting before uvicorn's own shutdown (`GatewayApp.stop_waiting`):
each poll answers the page as it stands (the client polls again from its cursor, on another gateway or this one once
restarted) and the process exits at once.
"""

from __future__ import annotations

import socket

import uvicorn

from gateway.app import GatewayApp


class GatewayServer(uvicorn.Server):
    """uvicorn's server for one `GatewayApp`: its shutdown answers the app's long-polls first."""

    def __init__(self, config: uvicorn.Config, app: GatewayApp) -> None:
        super().__init__(config)
        self._gateway = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._gateway.stop_waiting()
        await super().shutdown(sockets)
