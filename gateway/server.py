"""The gateway's HTTP server: uvicorn's, except that a stop first answers the long-polls in flight.

uvicorn stops gracefully: it waits until every request in flight has its answer. A finished-feed long-poll
(`GET /v1/admin/rollouts/finished?wait_s=...`, up to 300 s) would hold a stopping gateway that long (measured: a
SIGTERM with a 30 s poll in flight took 29 s to exit), and a Kubernetes pod past its grace period is killed with its
connections. `GatewayServer` tells the app to stop waiting before uvicorn's own shutdown (`GatewayApp.stop_waiting`):
each poll answers the page as it stands (the client polls again from its cursor, on another gateway or this one once
restarted) and the process exits at once.
"""

from __future__ import annotations

import functools
import socket

import uvicorn

from gateway.app import GatewayApp
from gateway.connection_limits import ConnectionLimits
from gateway.http_protocol import GatewayHttpProtocol

KEEP_ALIVE_S = 75  # an idle harness connection is kept open this long (uvicorn's default: 5 s)


def server_config(app: GatewayApp, host: str, port: int, *, loop: str = "uvloop") -> uvicorn.Config:
    """uvicorn's settings for the gateway (`harnessrl gateway serve` and the in-process test gateway alike): its HTTP
    protocol (`gateway.http_protocol`: bounded request heads, connections counted against the app's settings'
    limits), no WebSocket, no access log, no proxy headers, no server header."""
    settings = app.config
    limits = ConnectionLimits.build(settings.max_connections_per_client, settings.max_connections,
                                    settings.connection_limit_exempt)
    protocol = functools.partial(GatewayHttpProtocol, limits=limits)
    return uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, loop=loop,
                          http=protocol, ws="none",  # type: ignore[arg-type]
                          timeout_keep_alive=KEEP_ALIVE_S, lifespan="on", proxy_headers=False, server_header=False)


class GatewayServer(uvicorn.Server):
    """uvicorn's server for one `GatewayApp`: its shutdown answers the app's long-polls first."""

    def __init__(self, config: uvicorn.Config, app: GatewayApp) -> None:
        super().__init__(config)
        self._gateway = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._gateway.stop_waiting()
        await super().shutdown(sockets)
