"""How fast a harness reads the answer it keeps waiting: at least `MIN_RATE_BPS` once it has kept it waiting for
`GRACE_S`, or its connection is dropped.

An answer waits on its client when the connection's transport is paused for writing (its buffer and the kernel's
send buffer full: the client reads slower than the gateway sends); uvicorn's `send` then waits for the client to
read before it writes more. A client that reads a little now and then is never stalled for `WRITE_STALL_S`
(`http_protocol.py`), and kept a 32 MB artifact read (and the rollout's artifact-read slot) alive at 45 KB/s, and a
streamed call with it. `AnswerPace` times each `send` of one answer: once the sends have waited `GRACE_S` in all,
the answer must have gone out at `MIN_RATE_BPS` over that waiting, or the connection is dropped through the
protocol's `ABORT_EXTENSION` (the rest of the answer goes nowhere, as for a client that disconnected: a streamed
call is still read from the engine to its end and recorded, an artifact read ends at once). Bursts do not help: the
rate is what was sent over all the time spent waiting. Checked when a send returns: a client that reads nothing at
all is dropped by the protocol's write stall. A client reading what waits on it at `MIN_RATE_BPS` or faster is
served whatever the answer's size (in a cluster or through the local forwarder, tens of MB/s).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.http_protocol import ABORT_EXTENSION

GRACE_S = 10.0
"""How long an answer's sends may wait on the client in all before its pace counts."""
MIN_RATE_BPS = 256 * 1024
"""The slowest an answer may go out over the time its sends waited on the client, after `GRACE_S`."""


class AnswerPace:
    """One answer's sends: the bytes sent, how long the sends waited in all, and whether it was dropped for a slow
    client."""

    def __init__(self, abort: Callable[[str], None] | None, clock: Callable[[], float] = time.monotonic) -> None:
        self._abort = abort  # drops the connection (the protocol's ABORT_EXTENSION); None: not paced
        self._clock = clock
        self.sent_bytes = 0
        self.waited_s = 0.0
        self.dropped = False

    @classmethod
    def of(cls, scope: dict) -> AnswerPace:
        """The pace of the answer to `scope`'s request, dropping its connection through the server's extension."""
        return cls(scope.get("extensions", {}).get(ABORT_EXTENSION))

    def paced(self, send):
        """`send`, timed; the connection is dropped when the answer falls below the pace."""
        if self._abort is None:
            return send

        async def paced_send(message: dict) -> None:
            started = self._clock()
            await send(message)
            if self.dropped:
                return
            self.waited_s += self._clock() - started
            self.sent_bytes += len(message.get("body", b""))
            if self.waited_s > GRACE_S and self.sent_bytes < MIN_RATE_BPS * self.waited_s:
                self.dropped = True
                self._abort(f"read an answer at {self.sent_bytes / self.waited_s / 1024:.0f} KiB/s over the "
                            f"{self.waited_s:.0f} s it waited on it (at least {MIN_RATE_BPS // 1024} KiB/s)")
        return paced_send
