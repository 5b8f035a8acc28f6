"""Whether a sandbox can be built here, and if not why and how to fix it (checked once per process)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from functools import cache
from pathlib import Path

from sandbox.argv import build_argv, tool
from sandbox.errors import SandboxError
from sandbox.rlimits import within_current_limits
from sandbox.spec import NOBODY, Limits, SandboxSpec

TOOLS = {"bwrap": "bubblewrap (apt-get install bubblewrap)", "prlimit": "util-linux", "setpriv": "util-linux"}


def _probe_uid() -> int:
    return NOBODY if os.geteuid() == 0 else os.geteuid()


@cache
def sandbox_problem() -> str | None:
    """None when a sandbox starts here; else the reason and the fix."""
    for name, package in TOOLS.items():
        if not Path(tool(name)).is_file():
            return f"`{name}` is not installed; install {package}"
    uid = _probe_uid()
    with tempfile.TemporaryDirectory(prefix="harnessrl-sandbox-probe-") as workdir:
        os.chown(workdir, uid, uid) if os.geteuid() == 0 else None
        spec = SandboxSpec(writable=Path(workdir), uid=uid, gid=uid, limits=within_current_limits(Limits()))
        try:
            probe = subprocess.run(build_argv(spec, ["/bin/sh", "-c", "test $(id -u) = " + str(uid)],
                                              caller_uid=os.geteuid()),
                                   capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"the sandbox launcher failed to run ({exc})"
    if probe.returncode != 0:
        why = probe.stderr.strip() or f"exit status {probe.returncode}"
        fix = ("run the controller as root (or with CAP_SYS_ADMIN, CAP_SETUID, CAP_SETGID)" if os.geteuid() == 0
               else "enable unprivileged user namespaces (sysctl user.max_user_namespaces>0, "
                    "kernel.apparmor_restrict_unprivileged_userns=0) or run as root")
        return f"bubblewrap cannot build a sandbox here ({why}); {fix}"
    return None


def ensure_available() -> None:
    """Raise SandboxError (reason and fix) unless a sandbox can be built here."""
    if (problem := sandbox_problem()) is not None:
        raise SandboxError(f"cannot sandbox: {problem}. Nothing is run unsandboxed.")
