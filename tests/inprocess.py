"""The gateway and the scripted upstream served from a thread of the test process, for the fast tier.

Same wire as the real processes (HTTP on loopback, so harness subprocesses and the typed client reach them alike),
without an interpreter start and the imports per server (about 2-4 s each on 2 cores). What needs a real process
stays on `tests/gateway/support.py`'s `GatewayProcess`: a `kill -9` (durability) and the `harnessrl gateway serve`
command line itself.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from gateway.app import create_app
from gateway.config import load_gateway_config
from gateway.scripted import Script, ScriptedUpstream, serve
from gateway.server import GatewayServer, server_config
from tests.gateway.support import ADMIN_TOKEN, GRADER_TOKEN, free_port

START_TIMEOUT_S = 30.0


@dataclass
class InProcessGateway:
    """The gateway's ASGI app under uvicorn on a daemon thread (own event loop), on a free loopback port, with the
    tests' admin and grader tokens; restartable on the same database and port. `config_path` is a gateway YAML;
    `db_url` a store URL (a PostgreSQL database) used instead of the SQLite file `db_path`."""

    db_path: Path | None = None
    config_path: Path | None = None
    port: int = field(default_factory=free_port)
    db_url: str | None = None

    def __post_init__(self) -> None:
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> InProcessGateway:
        db_url = self.db_url or f"sqlite:///{self.db_path}"
        config = load_gateway_config(self.config_path, db_url=db_url, port=self.port,
                                     admin_token=ADMIN_TOKEN, grader_token=GRADER_TOKEN)
        app = create_app(config)
        server = GatewayServer(server_config(app, "127.0.0.1", self.port, loop="asyncio"), app)
        self._server, self._thread = server, threading.Thread(target=server.run, name="gateway", daemon=True)
        self._thread.start()
        _wait(lambda: server.started, self._thread, f"in-process gateway on {self.url}")
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=START_TIMEOUT_S)
        self._server = self._thread = None


@dataclass
class InProcessScripted:
    """`gateway.scripted`'s upstream on a daemon thread (own event loop), on a free loopback port."""

    script: Script
    port: int = field(default_factory=free_port)

    def __post_init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self.upstream: ScriptedUpstream | None = None  # the server's state (calls, last request), once started

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> InProcessScripted:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="scripted", daemon=True)
        self._thread.start()
        _wait(self._ready.is_set, self._thread, f"in-process scripted upstream on {self.base_url}")
        return self

    def _run(self) -> None:
        assert self._loop is not None
        asyncio.set_event_loop(self._loop)
        server, self.upstream = self._loop.run_until_complete(serve(self.script, "127.0.0.1", self.port))
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            self._loop.run_until_complete(server.wait_closed())
            self._loop.close()

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=START_TIMEOUT_S)
        self._loop = self._thread = None


def _wait(ready: Any, thread: threading.Thread, what: str) -> None:
    """Waits until `ready()` holds; raises naming `what` if its thread died or the start took too long."""
    event = threading.Event()
    for _ in range(int(START_TIMEOUT_S / 0.01)):
        if ready():
            return
        if not thread.is_alive():
            raise RuntimeError(f"{what} stopped before it was ready (see the log above)")
        event.wait(0.01)
    raise TimeoutError(f"{what} not ready after {START_TIMEOUT_S:.0f} s")
