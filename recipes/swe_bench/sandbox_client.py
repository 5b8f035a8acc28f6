"""The harness side of the sandbox channel (`controller.sandbox_channel`): run a command in the `sandbox` container
through the shared directory, and mini-swe-agent's environment built on it (LocalEnvironment's interface).

Every command has a timeout: the sandbox kills its process group after `timeout_s` (+5 s for SIGKILL); the client
gives up `grace_s` later still (a stuck or missing sandbox) and reports a timeout either way.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass
from pathlib import Path

from controller.sandbox_channel import KILL_GRACE_S, READY_FILE, SANDBOX_DIR_ENV
from recipes.swe.harness import sandboxed_environment

TIMEOUT_CODES = (124, 137)  # `timeout` after SIGTERM; SIGKILL


@dataclass(frozen=True)
class SandboxResult:
    """One command's end."""

    output: str  # stdout and stderr, interleaved
    returncode: int  # the command's exit status (-1 when the sandbox never answered)
    timed_out: bool  # killed at its timeout, or no answer in time


class SandboxClient:
    """Runs commands one at a time in the sandbox container that serves `ipc_dir`."""

    def __init__(self, ipc_dir: Path, *, poll_s: float = 0.05, grace_s: float = 10.0) -> None:
        self.ipc_dir, self.poll_s, self.grace_s = Path(ipc_dir), poll_s, grace_s
        self._ids = itertools.count(1)

    @classmethod
    def from_env(cls) -> SandboxClient:
        """The client for $HARNESSRL_SANDBOX_DIR (set by the sandboxed Job); raises naming the fix without it."""
        path = os.environ.get(SANDBOX_DIR_ENV)
        if not path:
            raise RuntimeError(f"${SANDBOX_DIR_ENV} is not set: this harness runs only in a Job with a sandbox "
                               "container (a task with an 'image', under the Kubernetes runner)")
        return cls(Path(path))

    def wait_ready(self, timeout_s: float) -> None:
        """Block until the sandbox loop started; TimeoutError naming the directory otherwise."""
        deadline = time.monotonic() + timeout_s
        while not (self.ipc_dir / READY_FILE).exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no sandbox answered in {self.ipc_dir} within {timeout_s:g} s; check the "
                                   "sandbox container's image and log")
            time.sleep(self.poll_s)

    def run(self, command: str, cwd: str, timeout_s: int) -> SandboxResult:
        """Run `command` with bash in `cwd` inside the sandbox; its output, exit status and whether it timed out."""
        stem = self.ipc_dir / f"{next(self._ids):08d}"
        paths = {suffix: stem.with_name(stem.name + suffix) for suffix in (".timeout", ".cwd", ".cmd", ".out", ".rc")}
        paths[".timeout"].write_text(str(int(timeout_s)))
        paths[".cwd"].write_text(cwd)
        staging = stem.with_name(stem.name + ".cmd.tmp")
        staging.write_text(command + "\n")
        os.replace(staging, paths[".cmd"])
        started = time.monotonic()
        deadline = started + timeout_s + KILL_GRACE_S + self.grace_s
        while not paths[".rc"].exists():
            if time.monotonic() > deadline:
                output = _read(paths[".out"])
                return SandboxResult(output + f"\n[no answer from the sandbox within {timeout_s} s]", -1, True)
            time.sleep(self.poll_s)
        code = int(_read(paths[".rc"]).strip() or -1)
        output = _read(paths[".out"])
        for path in paths.values():
            path.unlink(missing_ok=True)
        timed_out = code in TIMEOUT_CODES and time.monotonic() - started >= timeout_s
        return SandboxResult(output, code, timed_out)


def _read(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def build_environment(client: SandboxClient, cwd: str, timeout_s: int):
    """mini-swe-agent's environment whose commands run in the sandbox container (see `sandboxed_environment`)."""
    return sandboxed_environment(client.run, cwd, timeout_s)
