"""A connection is closed only once its client has what was sent to it, or is reset: the kernel never keeps an
answer queued for a client after the gateway let go of the connection.

A close hands what is still queued to the kernel, which keeps sending it on its own (a FIN-WAIT-1 orphan): a client
asking for a 400 KB artifact with `Connection: close` (or over HTTP/1.0) and reading nothing kept 375 KB of kernel
memory a connection for good, with the gateway's descriptor; one asking for 100 KB left an orphan that no longer
counted against any limit of the gateway's (an attack review: 40 of them still there after 100 s). `DrainingTransport`
stands in for the connection's transport: everything passes through to it but `close`, which waits while the
transport or the kernel still holds bytes for the client (polled, from 50 ms up to 1 s apart), closes once they
have gone (the connection's end sent right behind them), and resets the connection (`SO_LINGER` 0, `abort`) when
they have not gone within `GRACE_S` and the time they take at `MIN_RATE_BPS`. The connection keeps its place in the
limits until then. A client's half-close closes the same way (`GatewayHttpProtocol.eof_received`: the transport had
closed itself, past every deadline), and a stopping server resets what is left unread
(`GatewayHttpProtocol.shutdown`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import socket
import struct
import termios
from collections.abc import Callable
from typing import Any

GRACE_S = 75.0
"""How long a closed connection's client has to read what was still queued for it, besides its size's time: as long
as an idle keep-alive connection is kept with an answer unread (`server.KEEP_ALIVE_S`; a 10 s grace cut an honest
client that read a 1 MB answer 12 s after asking for it with `Connection: close`)."""
MIN_RATE_BPS = 256 * 1024
"""The rate at which that size's time is counted."""
FIRST_POLL_S, LAST_POLL_S = 0.05, 1.0
"""How often the queue is looked at while a close waits (doubling from the first to the last)."""


def unsent_bytes(transport: asyncio.Transport) -> int:
    """What the transport and the kernel still hold for the client (the kernel's part 0 where it cannot say)."""
    sock = transport.get_extra_info("socket")
    try:
        queued = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
    except (AttributeError, OSError, ValueError):
        queued = 0
    return transport.get_write_buffer_size() + queued


def reset_on_close(transport: asyncio.Transport) -> None:
    """SO_LINGER 0: the close resets the connection and the kernel drops what it still queued for the client (an
    abort alone left each stalled socket in FIN-WAIT-1 with about 4 MB queued for 5 minutes, outside every limit)."""
    sock = transport.get_extra_info("socket")
    with contextlib.suppress(AttributeError, OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class DrainingTransport:
    """The connection's transport, whose `close` waits for the client to have what was sent (see the module)."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop,
                 on_reset: Callable[[str], None]) -> None:
        self._transport, self._loop, self._on_reset = transport, loop, on_reset
        self._closing = False
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def write(self, data) -> None:
        self._transport.write(data)

    def is_closing(self) -> bool:
        return self._closing or self._transport.is_closing()

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        unsent = unsent_bytes(self._transport)
        if not unsent:
            self._transport.close()
            return
        with contextlib.suppress(RuntimeError, AttributeError, NotImplementedError):
            self._transport.pause_reading()  # nothing more is read from a connection being closed
            if self._transport.can_write_eof():
                self._transport.write_eof()  # the end follows the data at once; the descriptor stays ours
        self._deadline = self._loop.time() + GRACE_S + unsent / MIN_RATE_BPS
        self._timer = self._loop.call_later(FIRST_POLL_S, self._look, FIRST_POLL_S)

    def abort(self) -> None:
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
        self._transport.abort()

    def _look(self, waited_s: float) -> None:
        self._timer = None
        if self._transport.is_closing():  # aborted or lost meanwhile
            return
        if not unsent_bytes(self._transport):
            self._transport.close()
        elif self._loop.time() >= self._deadline:
            reset_on_close(self._transport)
            self._transport.abort()
            self._on_reset("did not read what was sent before its connection's close")
        else:
            wait_s = min(2 * waited_s, LAST_POLL_S)
            self._timer = self._loop.call_later(wait_s, self._look, wait_s)
