"""A raw asyncio server on 127.0.0.1 served from a thread of the test process: the scaffold of the test upstreams
that write their answers byte by byte (`tests/gateway/hostile_upstream.py`,
`tests/recipes/calculator/scripted_model.py`)."""

from __future__ import annotations

import asyncio
import threading
from typing import Self


class LoopbackServer:
    """Mixin: a subclass has a `port` and an async `_handle(reader, writer)`, and calls `_init_server(name)` once."""

    port: int

    def _init_server(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> Self:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"{self._thread.name} did not start on port {self.port}")
        return self

    def stop(self) -> None:
        """Cancels the answers still being written (one may pause for an hour), then stops the loop."""
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._cancel_handlers(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    @staticmethod
    async def _cancel_handlers() -> None:
        current = asyncio.current_task()
        pending = [task for task in asyncio.all_tasks() if task is not current]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", self.port))
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError
