"""How many connections the gateway holds at once: per client address, and in all.

Each connection the gateway holds costs a file descriptor; the process has a fixed number of them, and the same
descriptors open its store and its upstream connections. Bounding what one connection holds (`http_protocol.py`)
leaves the number of connections: one sandbox opening tens of thousands would use up the descriptors, and every
rollout's calls would fail (no upstream connection, no new harness connection). `ConnectionLimits` counts what is
held (pure bookkeeping: the protocol admits each new connection and releases it when lost):

- one client address may hold `per_client` connections (0: no limit); past it a connection is refused with a 429
  naming the setting, and past `MAX_REFUSALS_LINGERING` refusals of that address still lingering (a refusal reads
  and drops what the client sends for up to a second, so that it reads the answer) further ones are closed at once;
- once the process holds `PRESSURE_SHARE` of `total`, an address may hold only `PRESSED_PER_CLIENT` (and its
  refusals no longer linger): a few addresses cannot take the rest, and a client holding few connections (the
  control plane, an honest harness) still gets one;
- the process holds at most `total` connections, refused or not, of which the last `exempt_reserve` only exempt
  addresses may take; past them a new connection is answered 503 and closed at once. The default total is half the
  descriptors left after a reserve (each call in flight also holds an upstream connection), at most
  `MAX_DEFAULT_TOTAL` (about 13 kB of memory an idle connection).

Addresses in `exempt` (default: loopback) have no per-client limit: locally every sandbox reaches the gateway through
its own forwarder on loopback (`sandbox/forwarder.py`, at most 64 connections each) and the control plane runs
beside it. A client behind a proxy or a sidecar shares the proxy's address: on such a deployment put the proxy's
network in `exempt` (or set `per_client` to 0) and bound connections at the proxy.
"""

from __future__ import annotations

import ipaddress
import logging
import resource
from dataclasses import dataclass, field
from enum import StrEnum

MAX_REFUSALS_LINGERING = 16
"""Refusals of one client address that may linger at once (each holds a descriptor for up to a second)."""
PRESSURE_SHARE = 0.75
"""The share of `total` held past which every address is held to `PRESSED_PER_CLIENT`."""
PRESSED_PER_CLIENT = 8
"""What one address may hold once the process is under pressure."""
FD_RESERVE = 1024
"""File descriptors kept for the store, logs and the like when `total` is derived (at most a quarter of them)."""
MAX_DEFAULT_TOTAL = 16384
"""The default total's ceiling, whatever the descriptor limit (memory: about 13 kB an idle connection)."""
log = logging.getLogger(__name__)


class Admission(StrEnum):
    """What becomes of a new connection."""

    ADMITTED = "admitted"  # served, counted against its client address
    EXEMPT = "exempt"  # served, its address has no per-client limit
    CLIENT_REFUSED = "client_refused"  # its address holds `per_client`: answered 429, lingering
    CLIENT_CLOSED = "client_closed"  # the same, with `MAX_REFUSALS_LINGERING` refusals lingering: closed at once
    TOTAL_REFUSED = "total_refused"  # the process holds `total`: answered 503, closed at once


SERVED = frozenset({Admission.ADMITTED, Admission.EXEMPT})


@dataclass
class ConnectionLimits:
    """The connections held at once, per client address and in all (one per server; not thread-safe: the event
    loop's)."""

    per_client: int  # connections one client address may hold (0: no limit)
    total: int  # connections the process may hold
    exempt: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()  # networks with no per-client limit
    exempt_reserve: int = 0  # the last of `total` that only exempt addresses may take
    held: int = 0  # connections held now, refused ones included
    by_client: dict[str, int] = field(default_factory=dict)  # served connections per client address
    refusing: dict[str, int] = field(default_factory=dict)  # lingering refusals per client address

    @classmethod
    def build(cls, per_client: int, total: int | None, exempt: list[str] | tuple[str, ...]) -> ConnectionLimits:
        """From the gateway's settings; `total` None: derived from the process's file-descriptor limit."""
        networks = tuple(ipaddress.ip_network(network, strict=False) for network in exempt)
        total = total if total is not None else default_total()
        return cls(per_client=per_client, total=total, exempt=networks,
                   exempt_reserve=max(1, total // 16) if networks and total >= 32 else 0)

    def admit(self, address: str | None) -> Admission:
        """Count a new connection from `address` (None: not an IP peer, a unix socket) and say what becomes of it."""
        self.held += 1
        exempt = address is None or self._is_exempt(address)
        if self.held > self.total or (not exempt and self.held > self.total - self.exempt_reserve):
            return Admission.TOTAL_REFUSED
        if exempt or self.per_client == 0:
            return Admission.EXEMPT
        pressed = self.held > self.total * PRESSURE_SHARE
        limit = min(self.per_client, PRESSED_PER_CLIENT) if pressed else self.per_client
        served = self.by_client.get(address, 0)
        if served < limit:
            self.by_client[address] = served + 1
            return Admission.ADMITTED
        lingering = self.refusing.get(address, 0)
        if pressed or lingering >= MAX_REFUSALS_LINGERING:
            return Admission.CLIENT_CLOSED
        self.refusing[address] = lingering + 1
        return Admission.CLIENT_REFUSED

    def release(self, address: str | None, admission: Admission) -> None:
        """The connection `admit` answered `admission` for is closed."""
        self.held -= 1
        counts = {Admission.ADMITTED: self.by_client, Admission.CLIENT_REFUSED: self.refusing}.get(admission)
        if counts is not None and address is not None:
            left = counts[address] - 1
            if left:
                counts[address] = left
            else:
                del counts[address]

    def _is_exempt(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 scope (fe80::1%eth0) is not the address
        except ValueError:
            return False
        if ip.version == 6 and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip in network for network in self.exempt)


def client_address(peername: object) -> str | None:
    """The client address of a transport's `peername` (None for a unix socket, whose peer has no address)."""
    if isinstance(peername, tuple) and peername and isinstance(peername[0], str):
        return peername[0]
    return None


def default_total(descriptors: int | None = None) -> int:
    """Connections the process may hold: half the descriptors left after the reserve (a call in flight holds its
    harness's connection and one upstream), at most `MAX_DEFAULT_TOTAL`."""
    limit = descriptors if descriptors is not None else resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if limit == resource.RLIM_INFINITY:
        limit = 1 << 20
    return max(1, min(MAX_DEFAULT_TOTAL, (limit - min(FD_RESERVE, limit // 4)) // 2))


def raise_descriptor_limit(ceiling: int = 1 << 20) -> int:
    """Raise this process's soft file-descriptor limit towards its hard limit (at most `ceiling`); returns the soft
    limit it has then. A system that refuses (a hard limit over the kernel's `nr_open`, macOS's `OPEN_MAX`) keeps
    the one it had, with a warning: serving goes on, `max_connections` derived from it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(ceiling if hard == resource.RLIM_INFINITY else hard, ceiling)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning("could not raise the file-descriptor limit from %d to %d (%s); the gateway keeps %d", soft,
                    target, exc, soft)
        return soft
    return target
