"""An upstream that answers whatever a test tells it to, byte for byte and chunk by chunk: for the gateway's handling
of answers that break the protocol (issue 12, point 5). Served from a thread of the test process on loopback."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from tests.gateway.support import free_port
from tests.loopback_server import LoopbackServer


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
