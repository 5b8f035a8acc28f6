"""The local sandbox for the commands an SWE agent runs: no git, no network, no view of the task store, no secrets.

- `git` is a shim, first on PATH and bind-mounted over every real git binary on PATH, that prints GIT_DISABLED_MESSAGE
  and exits 1.
- Each command runs in fresh Linux network and mount namespaces (`unshare --net --mount`, needs root or CAP_SYS_ADMIN):
  no interface but a down loopback, so every socket connection fails; `hidden` paths (the task store with its pristine
  bases and instances) are covered by an empty read-only tmpfs.
- The environment is an allowlist: the rollout key and the other harness variables never reach the agent's commands.
The harness process itself keeps the network: only the commands it executes are sandboxed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

GIT_DISABLED_MESSAGE = "git is disabled in this sandbox"
ALLOW_NETWORK_ENV = "HARNESSRL_SWE_ALLOW_NETWORK"
# Variables passed through to sandboxed commands; everything else (OPENAI_API_KEY included) is dropped.
PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TERM", "TMPDIR", "VIRTUAL_ENV", "USER")
_PRELUDE = (
    'cmd="$1"; shim="$2"; shift 2; '
    'for p in "$@"; do case "$p" in '
    'hide:*) mount -t tmpfs -o size=16k,mode=0555,ro harnessrl-hidden "${p#hide:}" || exit 97 ;; '
    'git:*) mount --bind "$shim" "${p#git:}" || exit 97 ;; esac; done; '
    'exec bash -c "$cmd"'
)


class SandboxError(RuntimeError):
    """The sandbox cannot isolate commands as required."""


@cache
def isolation_problem() -> str | None:
    """None when `unshare --net --mount` works here, else why not (and how to fix it)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return "`unshare` (util-linux) is not installed; install util-linux"
    probe = subprocess.run([unshare, "--net", "--mount", "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return (f"`unshare --net --mount` failed ({probe.stderr.strip() or probe.returncode}); it needs root or "
                f"CAP_SYS_ADMIN (run the controller as root, or in a Kubernetes pod with the agent NetworkPolicy)")
    return None


def write_git_shim(shim_dir: Path) -> Path:
    """Write the `git` shim into `shim_dir` and return its path."""
    shim_dir.mkdir(parents=True, exist_ok=True)
    shim = shim_dir / "git"
    shim.write_text(f'#!/bin/sh\necho "{GIT_DISABLED_MESSAGE}" >&2\nexit 1\n')
    shim.chmod(0o755)
    return shim


@dataclass(frozen=True)
class CommandResult:
    """What one sandboxed command did."""

    output: str  # stdout and stderr, interleaved
    returncode: int  # the exit status (-9 after a timeout kill)
    timed_out: bool  # whether the command was killed for running past its timeout


@dataclass(frozen=True)
class Sandbox:
    """Runs agent commands in `cwd` with no git, no network and `hidden` paths covered."""

    cwd: Path  # the agent's repository copy
    shim_dir: Path  # a directory outside the repository for the git shim
    hidden: tuple[Path, ...] = ()  # existing directories to cover with an empty tmpfs (the task store)
    extra_env: dict[str, str] = field(default_factory=dict)  # variables added to the allowlisted environment
    allow_network: bool = False  # True runs without namespaces (only where isolation is impossible and accepted)

    def __post_init__(self) -> None:
        if not self.allow_network and (problem := isolation_problem()) is not None:
            raise SandboxError(f"agent commands cannot be isolated from the network: {problem}; "
                               f"set {ALLOW_NETWORK_ENV}=1 to run them WITHOUT network isolation")
        write_git_shim(self.shim_dir)

    def env(self) -> dict[str, str]:
        """The command environment: allowlisted variables, the shim directory first on PATH, no secrets."""
        env = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
        env["PATH"] = f"{self.shim_dir}:{env.get('PATH', '/usr/bin:/bin')}"
        return {**env, "PAGER": "cat", "GIT_DIR": "/nonexistent", **self.extra_env}

    def argv(self, command: str) -> list[str]:
        """The argv that runs `command` (a bash command line) inside the sandbox."""
        if self.allow_network:
            return ["bash", "-c", command]
        targets = [f"hide:{path}" for path in self.hidden if path.is_dir()]
        targets += [f"git:{path}" for path in _real_gits(self.shim_dir)]
        return ["unshare", "--net", "--mount", "bash", "-c", _PRELUDE, "sandbox", command,
                str(self.shim_dir / "git"), *targets]

    def run(self, command: str, timeout_s: float) -> CommandResult:
        """Run `command`, killing its whole process group after `timeout_s`."""
        process = subprocess.Popen(self.argv(command), cwd=self.cwd, env=self.env(), text=True, encoding="utf-8",
                                   errors="replace", stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            output, _ = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            return CommandResult(output=output, returncode=-9, timed_out=True)
        return CommandResult(output=output, returncode=process.returncode, timed_out=False)


def _real_gits(shim_dir: Path) -> list[Path]:
    """Every git binary on PATH other than the shim (resolved, deduplicated)."""
    found: dict[Path, None] = {}
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(directory or ".") / "git"
        if candidate.is_file() and os.access(candidate, os.X_OK) and Path(directory) != shim_dir:
            found[candidate.resolve()] = None
    return list(found)
