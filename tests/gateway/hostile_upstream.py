"""An upstream that answers whatever a test tells it to, byte for byte and chunk by chunk: for the gateway's handling
of answers that break the protocol (issue 12, point 5). Served from a thread of the test process on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from gateway.client import GatewayClient
from tests.gateway.api_support import write_config
from tests.gateway.support import ADMIN_TOKEN, free_port
from tests.inprocess import InProcessGateway
from tests.loopback_server import LoopbackServer

# A gateway's upstream timeout and the answers around it, so that no machine load turns one into the other: a test of
# a normal answer runs behind a PATIENT gateway (a loopback answer of a few bytes never takes a minute, however busy
# the machine), a test of the timeout behind an IMPATIENT one with an answer that pauses for NEVER_S (the timeout
# fires first however late it fires).
PATIENT_TIMEOUT_S = 60.0
IMPATIENT_TIMEOUT_S = 1.0
NEVER_S = 3600.0


@dataclass(frozen=True)
class Answer:
    """One scripted answer."""

    chunks: tuple[bytes, ...]  # the body, written one chunk at a time (close-delimited, no Content-Length)
    status: int = 200  # the HTTP status
    headers: tuple[tuple[str, str], ...] = (("content-type", "application/json"),)  # extra headers
    pause_s: float = 0.02  # sleep between chunks, so that each arrives on its own


@dataclass
class HostileUpstream(LoopbackServer):
    """Answers every request with `answer` (set it before each call)."""

    answer: Answer = field(default_factory=lambda: Answer((b"{}",)))
    port: int = field(default_factory=free_port)

    def __post_init__(self) -> None:
        self._init_server("hostile-upstream")

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            await reader.readexactly(length)
            answer = self.answer
            lines = [f"HTTP/1.1 {answer.status} Whatever", "connection: close",
                     *(f"{k}: {v}" for k, v in answer.headers)]
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
            for chunk in answer.chunks:
                writer.write(chunk)
                await writer.drain()
                await asyncio.sleep(answer.pause_s)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@contextmanager
def hostile_gateway(folder: Path, upstream: HostileUpstream, upstream_timeout_s: float) -> Iterator[InProcessGateway]:
    """A gateway (one upstream try, `upstream_timeout_s`) with `upstream` as the model `policy` (version 3) and a
    closed port as `dead`."""
    gateway = InProcessGateway(folder / "store.db", config_path=write_config(
        folder / "gw.yaml", retry_attempts=1, upstream_timeout_s=upstream_timeout_s)).start()
    try:
        with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
            admin.register_model("policy", upstream.base_url, version=3)
            admin.register_model("dead", f"http://127.0.0.1:{free_port()}/v1", version=3)
        yield gateway
    finally:
        gateway.stop()
