"""`harnessrl-agent-run`: how a recipe file's grader runs the agent's code (a program the policy wrote in the working
directory), on the grader sandbox's PATH.

    harnessrl-agent-run [--timeout-s 60] [--output out.txt] -- python "$HARNESSRL_WORKDIR/solution.py" arg...

The command runs in a sandbox nested in the grader's (package `sandbox`, started unprivileged: its own user, PID,
mount, IPC and network namespaces, no user namespaces inside, limits on processes, memory, CPU, wall time and output):
the working directory read-only, a fresh empty folder as its writable current directory, the interpreter, and nothing
of the grader (not its task and answer files, not its scratch, not its output). Its stdin is empty and its output
(stdout and stderr, capped) goes to `--output`, or is printed once everything in the nested sandbox has ended, so no
process of the agent's holds the grader's output, where the verdict is. The exit status is the command's (124 after
the time limit). This process and the grader (when it is a `python` command) are non-dumpable, so the agent's code,
which sees their process ids in the bound /proc, can neither read nor write their memory, files or root.

Run as a script in the grader's sandbox, where only this file and the `sandbox` package (standard library only) are
bound besides the interpreter; importable for tests.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import tempfile
from pathlib import Path

if __name__ == "__main__":  # as a script: the project root holds only the bound `sandbox` package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sandbox import Limits, Network, SandboxSpec, run_command  # noqa: E402
from sandbox.paths import interpreter_paths  # noqa: E402
from sandbox.rlimits import within_current_limits  # noqa: E402

PR_SET_DUMPABLE = 4
TIMED_OUT_STATUS = 124
PASSED_ENV = ("PATH", "LANG", "HARNESSRL_WORKDIR")  # nothing else of the grader's environment reaches the agent's code


def non_dumpable() -> bool:
    """Make this process non-dumpable (its memory, fds and root unreachable to same-uid processes without
    CAP_SYS_PTRACE); False where prctl is not available."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="harnessrl-agent-run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout-s", type=float, default=60.0, help="wall-clock limit (exit status 124 past it)")
    parser.add_argument("--output", type=Path, default=None, help="file for the captured output (default: stdout)")
    parser.add_argument("--memory-mb", type=int, default=1024, help="address space of each process")
    parser.add_argument("--max-output-bytes", type=int, default=1 << 20, help="output kept (head and tail)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args(argv)
    args.command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.command:
        parser.error("no command given: harnessrl-agent-run [options] -- COMMAND ARG...")
    return args


def agent_spec(workdir: Path, run_dir: Path, timeout_s: float, memory_mb: int) -> SandboxSpec:
    """The nested sandbox: `run_dir` writable (the cwd), the working directory and the interpreter read-only."""
    uid = os.geteuid()
    limits = Limits(processes=64, memory_bytes=memory_mb << 20, cpu_s=max(1, int(timeout_s) + 1),
                    file_bytes=64 << 20, tmp_bytes=64 << 20)
    env = {key: os.environ[key] for key in PASSED_ENV if key in os.environ} | {"HOME": str(run_dir)}
    return SandboxSpec(writable=run_dir, readonly=(*interpreter_paths(), workdir), uid=uid, gid=os.getegid(),
                       network=Network.NONE, limits=within_current_limits(limits), env=env)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    non_dumpable()
    workdir = Path(os.environ.get("HARNESSRL_WORKDIR") or os.getcwd()).absolute()
    home = Path(os.environ.get("HOME") or tempfile.gettempdir())
    run_dir = Path(tempfile.mkdtemp(prefix="agent-run-", dir=home if home.is_dir() else None)).absolute()
    result = run_command(agent_spec(workdir, run_dir, args.timeout_s, args.memory_mb), args.command,
                         timeout_s=args.timeout_s, max_output_bytes=args.max_output_bytes)
    if args.output is not None:
        args.output.write_text(result.output)
    else:
        sys.stdout.write(result.output)
        sys.stdout.flush()
    return TIMED_OUT_STATUS if result.timed_out else result.returncode


if __name__ == "__main__":
    sys.exit(main())
