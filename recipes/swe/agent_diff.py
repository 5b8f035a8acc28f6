"""The agent's final diff, taken in a sandbox of its own: its repository copy against a fresh buggy checkout.

The agent's tree is hostile input. The diff is computed by `diffs.py` run as a script (`python -I -B`, standard
library only) in the hardened sandbox (`sandbox`): an unprivileged uid of its own (files the agent made unreadable
stay unreadable), the two trees bound read-only and nothing else of the host (a link in the tree that points out of it
points at nothing there), no network, and limits on memory, CPU time, wall time and output. Whatever stops it (a
tree that takes too long or too much memory to diff, a file it cannot read, a diff over `MAX_PATCH_BYTES`) is
`AgentDiffError`: the agent's failure, named. A sandbox that cannot be built raises `SandboxError` (the grader's
own infrastructure).
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
from pathlib import Path

from recipes.swe import diffs
from recipes.swe.testrun import GRADER_UIDS
from sandbox import Limits, Network, SandboxSpec, run_command
from sandbox.paths import interpreter_paths
from sandbox.rlimits import within_current_limits

DIFFS_SCRIPT = Path(diffs.__file__).resolve()
MAX_PATCH_BYTES = 16 << 20  # a longer diff is no bug fix; the reward's details keep at most 1 MB of it anyway
DIFF_TIMEOUT_S = 300.0
DIFF_LIMITS = Limits(processes=16, memory_bytes=2 << 30, cpu_s=int(DIFF_TIMEOUT_S), file_bytes=1 << 20,
                     tmp_bytes=16 << 20)


class AgentDiffError(ValueError):
    """The agent's tree could not be diffed within the limits (the reason names which)."""


def diff_spec(scratch: Path, before: Path, after: Path) -> SandboxSpec:
    """The diff's sandbox: `scratch` as the (unused) cwd, the script, the interpreter and both trees read-only."""
    uid = GRADER_UIDS[secrets.randbelow(len(GRADER_UIDS))] if os.geteuid() == 0 else os.geteuid()
    return SandboxSpec(writable=scratch.resolve(),
                       readonly=(*interpreter_paths(), DIFFS_SCRIPT, before.resolve(), after.absolute()),
                       uid=uid, gid=uid, network=Network.NONE, limits=within_current_limits(DIFF_LIMITS),
                       env={"HOME": "/tmp", "LANG": "C.UTF-8"})


def agent_diff(before: Path, after: Path, *, timeout_s: float = DIFF_TIMEOUT_S) -> str:
    """The unified diff from tree `before` (the grader's) to tree `after` (the agent's, a real directory: the
    caller checks that it is not a link), computed in the sandbox."""
    with tempfile.TemporaryDirectory(prefix="harnessrl-swe-diff-") as scratch:
        argv = [sys.executable, "-I", "-B", str(DIFFS_SCRIPT), str(before.resolve()), str(after.absolute())]
        result = run_command(diff_spec(Path(scratch), before, after), argv, timeout_s=timeout_s,
                             max_output_bytes=MAX_PATCH_BYTES)
    if result.timed_out:
        raise AgentDiffError(f"diffing the agent's repository took longer than {timeout_s:g} s")
    if result.dropped_bytes:
        raise AgentDiffError(f"the agent's diff is over {MAX_PATCH_BYTES} bytes")
    if result.returncode != 0:
        last = result.output.strip().splitlines()[-1:] or [f"exit status {result.returncode}"]
        raise AgentDiffError(f"the agent's repository could not be diffed: {last[0][:500]}")
    return result.output
