"""How many connections the gateway holds at once: per client address, and in all.

Each connection the gateway holds costs a file descriptor; the process has a fixed number of them, and the same
descriptors open its store and its upstream connections. Bounding what one connection holds (`http_protocol.py`)
leaves the number of connections: one sandbox opening tens of thousands would use up the descriptors, and every
rollout's calls would fail (no upstream connection, no new harness connection). `ConnectionLimits` counts what is
held (pure bookkeeping: the protocol admits each new connection and releases it when lost):

- one client address may hold `per_client` connections (0: no limit); past it a connection is refused with a 429
  naming the setting, and past `MAX_REFUSALS_LINGERING` refusals of that address still lingering (a refusal reads
  and drops what the client sends for up to a second, so that it reads the answer) further ones are closed at once;
- the process holds at most `total` connections, refused or not; past it a new connection is answered 503 and closed
  at once (a flood from many addresses must not take the descriptors the store and the upstreams need).

Addresses in `exempt` (default: loopback) have no per-client limit: locally every sandbox reaches the gateway through
its own forwarder on loopback (`sandbox/forwarder.py`, at most 64 connections each) and the control plane runs
beside it. A client behind a proxy or a sidecar shares the proxy's address: on such a deployment put the proxy's
network in `exempt` (or set `per_client` to 0) and bound connections at the proxy.
"""

from __future__ import annotations

import ipaddress
import resource
from dataclasses import dataclass, field
from enum import StrEnum

MAX_REFUSALS_LINGERING = 16
"""Refusals of one client address that may linger at once (each holds a descriptor for up to a second)."""
FD_RESERVE = 1024
"""File descriptors kept for the store, the upstream connections and logs when `total` is derived from the limit."""
DEFAULT_EXEMPT = ("127.0.0.0/8", "::1/128")


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
    held: int = 0  # connections held now, refused ones included
    by_client: dict[str, int] = field(default_factory=dict)  # served connections per client address
    refusing: dict[str, int] = field(default_factory=dict)  # lingering refusals per client address

    @classmethod
    def build(cls, per_client: int, total: int | None, exempt: list[str] | tuple[str, ...]) -> ConnectionLimits:
        """From the gateway's settings; `total` None: derived from the process's file-descriptor limit."""
        networks = tuple(ipaddress.ip_network(network, strict=False) for network in exempt)
        return cls(per_client=per_client, total=total if total is not None else default_total(), exempt=networks)

    def admit(self, address: str | None) -> Admission:
        """Count a new connection from `address` (None: not an IP peer, a unix socket) and say what becomes of it."""
        self.held += 1
        if self.held > self.total:
            return Admission.TOTAL_REFUSED
        if self.per_client == 0 or address is None or self._is_exempt(address):
            return Admission.EXEMPT
        served = self.by_client.get(address, 0)
        if served < self.per_client:
            self.by_client[address] = served + 1
            return Admission.ADMITTED
        lingering = self.refusing.get(address, 0)
        if lingering >= MAX_REFUSALS_LINGERING:
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
    """Connections the process may hold: its file-descriptor limit less `FD_RESERVE`, at least half of it."""
    limit = descriptors if descriptors is not None else resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if limit == resource.RLIM_INFINITY:
        limit = 1 << 20
    return max(limit - FD_RESERVE, limit // 2)


def raise_descriptor_limit(ceiling: int = 1 << 20) -> int:
    """Raise this process's soft file-descriptor limit to its hard limit (at most `ceiling`); returns the new one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(ceiling if hard == resource.RLIM_INFINITY else hard, ceiling)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target
