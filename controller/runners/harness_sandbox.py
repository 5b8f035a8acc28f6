"""The sandbox a local harness attempt runs in (pure): what it may read, its one way out, its environment.

The harness sees its working directory (read-write), the interpreter with its packages and its own code (read-only),
and 127.0.0.1:`port`, relayed to its own rollout's gateway path and nothing else. Nothing of the controller's
environment enters but the allow-list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from controller.runners.base import RunnerStartError, RunSpec
from sandbox import GatewayRoute, Limits, Network, SandboxSpec
from sandbox.paths import interpreter_paths, module_closure

DEFAULT_LIMITS = Limits(processes=512, memory_bytes=16 << 30, cpu_s=4 * 3600, file_bytes=2 << 30)


@dataclass(frozen=True)
class HarnessSandbox:
    """How the local runner sandboxes harnesses."""

    limits: Limits = DEFAULT_LIMITS  # resource limits of each attempt
    allow_network: bool = False  # the host's network instead of the gateway route (weakens the network only)
    port: int = 18080  # the in-sandbox loopback port of the gateway route
    first_uid: int = 100_000  # attempts run as first_uid + slot (a uid of their own: process limits, signals)
    readonly: tuple[Path, ...] = ()  # more read-only paths for every harness (a model cache, a corpus)
    scratch: tuple[Path, ...] = field(default=())  # read-write paths shared by every harness (tests only)


@dataclass(frozen=True)
class GatewayTarget:
    """Where the rollout's base URL points: the gateway's address and the rollout's path."""

    host: str  # the gateway's host
    port: int  # its port
    path: str  # the rollout's base path (/r/{id}/v1)


def gateway_target(spec: RunSpec) -> GatewayTarget:
    """The gateway behind `spec.base_url`; only a plain-HTTP `/r/{rollout id}/...` URL can be forwarded."""
    url = urlsplit(spec.base_url)
    if url.scheme != "http" or not url.hostname or not url.path.startswith(f"/r/{spec.rollout_id}/"):
        raise RunnerStartError(f"base URL {spec.base_url!r} cannot be forwarded into the sandbox: it must be "
                               f"http://host:port/r/{spec.rollout_id}/...")
    return GatewayTarget(url.hostname, url.port or 80, url.path)


def code_paths(command: Sequence[str]) -> tuple[Path, ...]:
    """The harness's own code: the closure of `-m module`, or script files named by absolute path."""
    paths: list[Path] = []
    for index, arg in enumerate(command):
        if arg == "-m" and index + 1 < len(command):
            try:
                paths += module_closure(command[index + 1])
            except ValueError:
                continue  # not a package of a source tree (installed with the interpreter: bound with it)
        elif index > 0 and arg.startswith("/") and Path(arg).is_file():
            paths.append(Path(arg).resolve())
    return tuple(paths)


def harness_spec(spec: RunSpec, env: Mapping[str, str], *, policy: HarnessSandbox, uid: int,
                 socket: Path, python: Path) -> SandboxSpec:
    """The sandbox of one attempt; `env` is its environment with OPENAI_BASE_URL already pointing inside."""
    network = Network.HOST if policy.allow_network else Network.GATEWAY
    route = None if policy.allow_network else GatewayRoute(socket=socket, port=policy.port, python=python)
    readonly = (*interpreter_paths(), *code_paths(spec.command), *spec.readonly, *policy.readonly)
    return SandboxSpec(writable=spec.workdir, readonly=readonly, scratch=policy.scratch, uid=uid, gid=uid,
                       network=network, gateway=route, limits=policy.limits, env=dict(env))


def inside_base_url(target: GatewayTarget, policy: HarnessSandbox) -> str:
    """OPENAI_BASE_URL as the harness sees it: the in-sandbox loopback end of the gateway route."""
    return f"http://127.0.0.1:{policy.port}{target.path}"
