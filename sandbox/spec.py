"""What one sandbox is: its user, its files, its network, its limits and its environment (pure data)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType

GIB = 1 << 30
MIB = 1 << 20
NOBODY = 65534  # the default unprivileged uid and gid
SOCKET_INSIDE = Path("/run/harnessrl/gateway.sock")  # where the gateway socket appears in the sandbox
LOOPBACK_INSIDE = Path("/run/harnessrl/loopback.py")  # where the in-sandbox forwarder script appears
NETWORK_ALLOWED_MESSAGE = ("network allowed: the sandbox shares the host's network (the engine, the gateway's admin "
                           "API, DNS and the internet are reachable); everything else holds (unprivileged user, no "
                           "task store, read-only system, limits, process cleanup)")


class Network(StrEnum):
    """How much network a sandbox has."""

    NONE = "none"  # an own network namespace with only a loopback: no socket reaches outside
    GATEWAY = "gateway"  # NONE plus a loopback TCP port forwarded to one rollout's gateway path (see GatewayRoute)
    HOST = "host"  # the host's network (the "network allowed" switch): weakens the network and nothing else


@dataclass(frozen=True)
class GatewayRoute:
    """The only way out of a `Network.GATEWAY` sandbox: 127.0.0.1:`port` inside, relayed to `socket` outside."""

    socket: Path  # the unix socket a GatewayForwarder listens on (outside the sandbox)
    port: int = 18080  # the loopback TCP port inside the sandbox
    python: Path = Path("/usr/bin/python3")  # the interpreter that runs the in-sandbox relay (must be in readonly)


@dataclass(frozen=True)
class Limits:
    """Resource limits of everything in a sandbox (setrlimit through prlimit; per process unless said)."""

    processes: int = 512  # RLIMIT_NPROC: processes of the sandbox's uid (give each sandbox its own uid)
    memory_bytes: int = 8 * GIB  # RLIMIT_AS: address space of each process
    cpu_s: int = 3600  # RLIMIT_CPU: CPU seconds of each process
    file_bytes: int = 1 * GIB  # RLIMIT_FSIZE: the largest file a process may write
    open_files: int = 1024  # RLIMIT_NOFILE
    tmp_bytes: int = 512 * MIB  # size of the sandbox's private /tmp (a tmpfs)


@dataclass(frozen=True)
class SandboxSpec:
    """One sandbox. Nothing of the host is visible but `readonly`, `writable`, `scratch` and the system files."""

    writable: Path  # the working directory: bound read-write, the command's cwd
    readonly: tuple[Path, ...] = ()  # bound read-only at the same path (interpreter, venv, the harness's code)
    scratch: tuple[Path, ...] = ()  # further read-write directories (an output folder), at the same path
    uid: int = NOBODY  # the unprivileged user everything runs as (never 0)
    gid: int = NOBODY  # its group (never 0)
    network: Network = Network.NONE  # how much network (GATEWAY needs `gateway`)
    gateway: GatewayRoute | None = None  # the route of a Network.GATEWAY sandbox
    limits: Limits = field(default_factory=Limits)  # resource limits
    env: Mapping[str, str] = field(default_factory=dict)  # the whole environment of the command (nothing inherited)
    hostname: str = "sandbox"  # the UTS name inside

    def __post_init__(self) -> None:
        if self.uid == 0 or self.gid == 0:
            raise ValueError(f"sandbox uid/gid must not be 0 (got {self.uid}/{self.gid}); use an unprivileged id "
                             f"such as {NOBODY}")
        if (self.network == Network.GATEWAY) != (self.gateway is not None):
            raise ValueError(f"network={self.network} with gateway={self.gateway}: a gateway route is given exactly "
                             f"when network is {Network.GATEWAY}")
        for path in (self.writable, *self.readonly, *self.scratch):
            if not path.is_absolute():
                raise ValueError(f"sandbox path {path} is relative; give absolute paths")
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
