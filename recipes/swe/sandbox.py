"""The SWE agent's commands, each in a sandbox of its own (package `sandbox`): no network, no store, no secrets.

Under the local runner the harness itself is sandboxed (an unprivileged uid, only its working directory, only its
rollout's gateway path); each command the agent runs is then a sandbox inside that one, as the harness's own uid:
only the repository is writable, no network at all (not even the gateway route), no user namespaces, the harness's
processes out of reach (another PID namespace) and their environment unreadable (another user namespace). Started as
root (the grader's test runs, a harness run by hand), commands run as an unprivileged uid instead.
- The task store, gold data and git objects are not in the sandbox at all; `hidden` is checked to stay outside every
  bound path. `git` is a shim first on PATH that prints GIT_DISABLED_MESSAGE (a convenience: with no `.git` and no
  store there is nothing for git to recover; the shim is not the boundary).
- The environment is an allowlist: the rollout key and the other harness variables never reach the commands.
- Output is capped (head and tail kept), processes, memory, CPU time and file size are limited.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from sandbox import (
    NETWORK_ALLOWED_MESSAGE,
    NOBODY,
    CommandResult,
    Limits,
    Network,
    SandboxError,
    SandboxSpec,
    ensure_available,
    grant,
    run_command,
    run_in_container,
    sandbox_problem,
)
from sandbox.paths import interpreter_paths

GIT_DISABLED_MESSAGE = "git is disabled in this sandbox"
ALLOW_NETWORK_ENV = "HARNESSRL_SWE_ALLOW_NETWORK"
# "container": the harness runs in a Kubernetes agent pod, which is the sandbox (no store, no token, no capabilities,
# the agent NetworkPolicy) and where bwrap cannot create its namespaces: commands run as ContainerCommands. Set by the
# controller's configuration (harness_env), never by the agent (its commands start after the harness read it).
SANDBOX_MODE_ENV = "HARNESSRL_SWE_SANDBOX"
# Variables passed through to sandboxed commands; everything else (OPENAI_API_KEY included) is dropped.
PASSED_ENV = ("PATH", "LANG", "LC_ALL", "TERM", "VIRTUAL_ENV")
COMMAND_LIMITS = Limits(processes=256, memory_bytes=4 << 30, cpu_s=900, file_bytes=1 << 30, tmp_bytes=256 << 20)
MAX_OUTPUT_BYTES = 1 << 20  # of one command's output kept (its first and last halves)
log = logging.getLogger(__name__)
__all__ = ["ALLOW_NETWORK_ENV", "GIT_DISABLED_MESSAGE", "SANDBOX_MODE_ENV", "CommandResult", "ContainerCommands",
           "Sandbox", "SandboxError", "isolation_problem", "write_git_shim"]


def isolation_problem() -> str | None:
    """None when commands can be sandboxed here, else why not (and how to fix it)."""
    return sandbox_problem()


def write_git_shim(shim_dir: Path) -> Path:
    """Write the `git` shim into `shim_dir` and return its path."""
    shim_dir.mkdir(parents=True, exist_ok=True)
    shim = shim_dir / "git"
    shim.write_text(f'#!/bin/sh\necho "{GIT_DISABLED_MESSAGE}" >&2\nexit 1\n')
    shim.chmod(0o755)
    shim_dir.chmod(0o755)
    return shim


@dataclass(frozen=True)
class Sandbox:
    """Runs agent commands in `cwd`, each in its own sandbox."""

    cwd: Path  # the agent's repository copy: the only writable path but `scratch`
    shim_dir: Path  # a directory outside the repository for the git shim
    hidden: tuple[Path, ...] = ()  # paths that must not be visible (the task store): checked to be outside the binds
    extra_env: dict[str, str] = field(default_factory=dict)  # variables added to the allowlisted environment
    allow_network: bool = False  # the host's network for commands (weakens the network only, says so)
    scratch: tuple[Path, ...] | None = None  # more writable directories; None: shim_dir's parent (testrun's outcomes)
    limits: Limits = COMMAND_LIMITS  # resource limits of each command
    uid: int | None = None  # the commands' uid: None is the caller's own, or NOBODY when the caller is root

    def __post_init__(self) -> None:
        try:
            ensure_available()
        except SandboxError as exc:
            raise SandboxError(f"agent commands cannot be sandboxed: {exc}") from exc
        write_git_shim(self.shim_dir)
        spec = self.spec()
        bound = (spec.writable, *spec.readonly, *spec.scratch)
        for hidden in self.hidden:
            for path in bound:
                if hidden.resolve().is_relative_to(path.resolve()) or path.resolve().is_relative_to(hidden.resolve()):
                    raise SandboxError(f"{hidden} must stay out of the agent's sandbox but {path} is bound there; "
                                       f"keep the store outside the working directory and the interpreter")
        for path in (spec.writable, *spec.scratch):
            grant(path, spec.uid, spec.gid)
        if self.allow_network:
            log.warning("%s=1: %s", ALLOW_NETWORK_ENV, NETWORK_ALLOWED_MESSAGE)

    def env(self) -> dict[str, str]:
        """The command environment: allowlisted variables, the shim and the interpreter first on PATH, no secrets."""
        return command_env(self.cwd, self.shim_dir, self.extra_env)

    def spec(self) -> SandboxSpec:
        """The sandbox of each command."""
        uid = self.uid if self.uid is not None else (NOBODY if os.geteuid() == 0 else os.geteuid())
        python_path = [Path(p) for p in self.extra_env.get("PYTHONPATH", "").split(os.pathsep) if p]
        scratch = (self.shim_dir.parent,) if self.scratch is None else self.scratch
        shim = () if any(self.shim_dir.is_relative_to(path) for path in scratch) else (self.shim_dir,)
        return SandboxSpec(writable=self.cwd.resolve(), readonly=(*interpreter_paths(), *shim, *python_path),
                           scratch=scratch, uid=uid, gid=uid, limits=self.limits, env=self.env(),
                           network=Network.HOST if self.allow_network else Network.NONE)

    def argv(self, command: str) -> list[str]:
        """The command line run inside the sandbox for `command` (a bash command line)."""
        return ["bash", "-c", command]

    def run(self, command: str, timeout_s: float) -> CommandResult:
        """Run `command`; everything it started is gone when it ends or after `timeout_s`."""
        return run_command(self.spec(), self.argv(command), timeout_s, MAX_OUTPUT_BYTES)


def command_env(cwd: Path, shim_dir: Path, extra_env: dict[str, str]) -> dict[str, str]:
    """Allowlisted variables, the git shim and the interpreter first on PATH, HOME in the repository, no secrets."""
    env = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
    env["PATH"] = f"{shim_dir}:{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    return {**env, "HOME": str(cwd), "PAGER": "cat", "GIT_DIR": "/nonexistent", **extra_env}


@dataclass(frozen=True)
class ContainerCommands:
    """Runs agent commands where the container is the sandbox (SANDBOX_MODE_ENV=container: a Kubernetes agent pod):
    the allowlisted environment, a process group of its own, the time limit and the output cap; no bwrap."""

    cwd: Path  # the agent's repository copy
    shim_dir: Path  # a directory outside the repository for the git shim
    extra_env: dict[str, str] = field(default_factory=dict)  # variables added to the allowlisted environment

    def __post_init__(self) -> None:
        write_git_shim(self.shim_dir)

    def run(self, command: str, timeout_s: float) -> CommandResult:
        """Run `command` (a bash command line) to its end or `timeout_s`; its process group is killed after."""
        return run_in_container(["bash", "-c", command], cwd=self.cwd,
                                env=command_env(self.cwd, self.shim_dir, self.extra_env), timeout_s=timeout_s,
                                max_output_bytes=MAX_OUTPUT_BYTES)
