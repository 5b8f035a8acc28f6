"""The request bytes a rollout's harness has in flight at once, and the process's in all.

A request's body stays in memory from its arrival until its answer is sent: a chat call holds its body while the
engine generates, a paused one for up to `pause_hold_timeout_s`. One body is bounded (`max_body_bytes`, 32 MiB) and
so is the number of connections an address holds (`connection_limits.py`, 256), but not their product: one pod
could hold 8 GB of bodies sent and never answered, or trickled forever. `RequestBytes` charges each harness request's
body to its rollout from the moment it is declared (Content-Length, before a byte is read) or arrives (a chunked
body, as it comes) until the request's handler has returned:

- a rollout holds at most `per_rollout` bytes (429 `request_bytes_in_flight`: send fewer or smaller requests at
  once); a pod holds one rollout's key, so this bounds what one pod holds;
- the process holds at most `total` (503 `gateway_request_bytes_full` with `Retry-After`: many rollouts at once).

A request is charged more than its body for what the gateway builds from it (`Held.add`): parsing its JSON
(`strict_json.parse_bytes`: up to 30 times the body for one made of tiny values) before the parse, and the earlier
conversation a call continues (`gateway.continuation`) or compares (`gateway.recorded_turns`) before it is loaded,
so that a small request cannot make the gateway hold much more than it is charged. A request whose charge alone
passes `per_rollout` is refused with a 413 (`request_too_costly`): it would never fit.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.errors import PayloadTooLarge, QuotaExceeded, RetryLater


class RequestBytesInFlight(QuotaExceeded):
    """The rollout's requests in flight hold its share already: 429."""

    code = "request_bytes_in_flight"


class RequestBytesFull(RetryLater):
    """The process's requests in flight hold its whole share: 503, retry after `retry_after_s`."""

    code = "gateway_request_bytes_full"


SMALLER_REQUEST = "send a smaller request (fewer, longer values: a long list as one string) or raise that limit"


class RequestTooCostly(PayloadTooLarge):
    """One request would hold more than its rollout may at once, whatever else is in flight: 413."""

    code = "request_too_costly"


class Held:
    """What one request holds: its declared length once its body is first read, then what arrives past it."""

    def __init__(self, ledger: RequestBytes, rollout_id: str) -> None:
        self._ledger, self.rollout_id = ledger, rollout_id
        self.bytes = 0  # charged so far
        self._arrived = 0  # body bytes received so far
        self._reading = False  # the route has begun to read the body

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *exc_info) -> None:
        self._ledger.release(self)  # a class, not a generator: half the cost of contextlib's on every call

    def counting(self, receive, declared_bytes: Callable[[], int]):
        """`receive` charging this request: `declared_bytes()` (its Content-Length, looked up only by a route that
        reads a body) at its first call (the route reads a body only once the caller is authenticated: a stranger
        charges nothing), then whatever arrives past them."""
        async def charged_receive() -> dict:
            if not self._reading:
                self._reading = True
                self._ledger.charge(self, declared_bytes())
            message = await receive()
            self._arrived += len(message.get("body", b""))
            if self._arrived > self.bytes:
                self._ledger.charge(self, self._arrived - self.bytes)
            return message
        return charged_receive

    def room(self) -> int:
        """The bytes this request could be charged more right now (its rollout's share and the process's left)."""
        ledger = self._ledger
        return max(0, min(ledger.per_rollout - ledger.by_rollout.get(self.rollout_id, 0), ledger.total - ledger.held))

    def add(self, size_bytes: int, what: str, fix: str = SMALLER_REQUEST) -> None:
        """Charge `size_bytes` more for what this request is about to build or load (`what`, as a refusal names it):
        RequestTooCostly (413, saying `fix`) when the request alone would pass its rollout's share, else as any
        charge (429, 503), nothing charged."""
        per_rollout = self._ledger.per_rollout
        if self.bytes + size_bytes > per_rollout:
            raise RequestTooCostly(
                f"{what} would take about {size_bytes} bytes of memory, which with this request's {self.bytes} "
                f"passes the {per_rollout} one rollout's requests may hold at once "
                f"(max_request_bytes_in_flight_per_rollout): {fix}")
        self._ledger.charge(self, size_bytes)


class RequestBytes:
    """The request bytes in flight, per rollout and in all (the event loop's: not thread-safe)."""

    def __init__(self, per_rollout: int, total: int) -> None:
        self.per_rollout = per_rollout  # the most one rollout's requests in flight may hold
        self.total = total  # the most the process's may hold
        self.held = 0
        self.by_rollout: dict[str, int] = {}

    def holding(self, rollout_id: str) -> Held:
        """Charge one request of `rollout_id` for a `with` block; everything it charged is released at its end."""
        return Held(self, rollout_id)

    def release(self, held: Held) -> None:
        """Give back everything `held` was charged (its `with` block ended)."""
        if held.bytes:
            self.held -= held.bytes
            left = self.by_rollout[held.rollout_id] - held.bytes
            if left:
                self.by_rollout[held.rollout_id] = left
            else:
                del self.by_rollout[held.rollout_id]
            held.bytes = 0

    def charge(self, held: Held, size_bytes: int) -> None:
        """Charge `size_bytes` more to `held`, or refuse (nothing charged)."""
        if size_bytes <= 0:
            return
        rollout = self.by_rollout.get(held.rollout_id, 0)
        if rollout + size_bytes > self.per_rollout:
            raise RequestBytesInFlight(
                f"rollout {held.rollout_id!r}'s requests in flight hold {rollout} bytes; {size_bytes} more would pass "
                f"the {self.per_rollout} one rollout may hold at once (max_request_bytes_in_flight_per_rollout): "
                "send fewer or smaller requests at once")
        if self.held + size_bytes > self.total:
            raise RequestBytesFull(
                f"the gateway's requests in flight hold {self.held} bytes, the most it holds is {self.total} "
                "(max_request_bytes_in_flight); retry shortly")
        self.by_rollout[held.rollout_id] = rollout + size_bytes
        self.held += size_bytes
        held.bytes += size_bytes
