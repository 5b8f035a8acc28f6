"""A recipe file's grader command, run outside the harness's sandbox in a hardened sandbox of its own.

The grader reads what the policy wrote, so it runs like `recipes/swe/agent_diff.py`'s diff: an unprivileged uid of its
own (files the agent made unreadable stay unreadable), no network, limits on memory, processes, CPU time, wall time
and output, and only these paths: the interpreter, the recipe's folder and the finished working directory, read-only;
the task (the rollout's whole input, not the working directory's copy the harness could have changed) and the final
answer (from the gateway's records) as root-owned 0444 files in a read-only folder of their own; `harnessrl-agent-run`
(agent_run.py, on PATH); and an empty scratch directory of its own as the current directory. Its environment:
HARNESSRL_TASK, HARNESSRL_WORKDIR, HARNESSRL_ANSWER, HARNESSRL_EXIT_CODE, HOME, LANG, PATH.

The grader's process is non-dumpable when its command is `python SCRIPT ...` or `python -m MODULE ...` (prctl
PR_SET_DUMPABLE 0 before the script runs: execve resets it, so it is set inside the interpreter), so code of the
agent's that it runs cannot read or write its memory. It must run such code only through `harnessrl-agent-run`
(a nested sandbox without the task, the answer or the grader's output); a program it starts itself can read the task.

Its verdict is the last non-empty line of its output (lines split at "\n" only): a JSON object with a number `reward`
within the recipe's `reward_range` and an optional object `details`. Anything else (no such line, a reward out of the
range, a crash, a timeout, an output past the cap) is `GraderVerdictError`: the attempt's failure with the reason
(the range's bottom: the recipe's `failure_reward`; see controller/report.py). A sandbox that cannot be built is
`SandboxError`: the grader's own infrastructure (infra, retried).
"""

from __future__ import annotations

import json
import math
import os
import secrets
import shlex
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox import Limits, Network, SandboxSpec, grant, run_command
from sandbox.paths import interpreter_paths, sandbox_package_dir
from sandbox.rlimits import within_current_limits

GRADER_UIDS = range(270_000, 335_536)  # above recipes.swe.testrun's graders and the local runner's harness uids
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
AGENT_RUN = "harnessrl-agent-run"  # the grader's way to run the agent's code (agent_run.py)
AGENT_RUN_SCRIPT = Path(__file__).resolve().parent / "agent_run.py"
# Runs the grader's script or module non-dumpable: prctl(PR_SET_DUMPABLE, 0) is reset by execve, so it is set here,
# inside the interpreter that then runs the script as __main__ (argv and sys.path[0] as `python SCRIPT` gives them).
NON_DUMPABLE_LAUNCHER = (
    "import ctypes, os, runpy, sys\n"
    "if ctypes.CDLL(None).prctl(4, 0, 0, 0, 0) != 0: sys.exit('harnessrl: cannot make the grader non-dumpable')\n"
    "sys.argv = sys.argv[1:]\n"
    "if sys.argv[0] == '-m':\n"
    "    sys.argv = sys.argv[1:]; sys.path[0] = os.getcwd()\n"
    "    runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n"
    "else:\n"
    "    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))\n"
    "    runpy.run_path(sys.argv[0], run_name='__main__')\n")


class GraderVerdictError(ValueError):
    """The grader gave no usable verdict for this attempt (the reason names what it printed or why it stopped)."""


@dataclass(frozen=True)
class GraderRun:
    """One grading: the command, the recipe's folder, the limits."""

    command: tuple[str, ...]  # argv, paths already absolute
    folder: Path  # the recipe's folder (the grader's code), bound read-only
    timeout_s: float
    memory_bytes: int
    max_output_bytes: int
    reward_range: tuple[float, float] = (0.0, 1.0)  # [lowest, highest]; a verdict outside it is refused


def non_dumpable_argv(command: tuple[str, ...], python: str) -> list[str]:
    """`command` run non-dumpable when it is `python SCRIPT ...` or `python -m MODULE ...` (the interpreter given as
    `python`); any other command as it is (it stays dumpable: SECURITY.md)."""
    head, *rest = command
    if head != python or not rest or (rest[0].startswith("-") and rest[0] != "-m") or rest[:1] == ["-m"] and \
            len(rest) < 2:
        return list(command)
    return [head, "-c", NON_DUMPABLE_LAUNCHER, *rest]


def grader_spec(run: GraderRun, scratch: Path, workdir: Path, env: dict[str, str],
                inputs: tuple[Path, ...] = ()) -> SandboxSpec:
    """The grader's sandbox: `scratch` as the writable cwd; the interpreter, the recipe folder, the working directory,
    `inputs` (the task, the answer, the agent-run tool) and what `harnessrl-agent-run` needs, read-only; no
    network."""
    uid = GRADER_UIDS[secrets.randbelow(len(GRADER_UIDS))] if os.geteuid() == 0 else os.geteuid()
    limits = Limits(processes=64, memory_bytes=run.memory_bytes, cpu_s=max(1, math.ceil(run.timeout_s)),
                    file_bytes=64 << 20, tmp_bytes=64 << 20)
    readonly = (*interpreter_paths(), run.folder, workdir.absolute(), *inputs, AGENT_RUN_SCRIPT,
                sandbox_package_dir())
    return SandboxSpec(writable=scratch.resolve(), readonly=readonly, uid=uid, gid=uid, network=Network.NONE,
                       limits=within_current_limits(limits), env=env)


def run_grader(run: GraderRun, task: dict[str, Any], workdir: Path, answer: str,
               exit_code: int | None) -> tuple[float, dict[str, Any]]:
    """(reward, details) from the grader's last output line; GraderVerdictError when there is none."""
    with tempfile.TemporaryDirectory(prefix="harnessrl-file-grader-") as tmp:
        root = Path(tmp).resolve()
        inputs, tools, scratch = read_only_inputs(root, task, answer)
        env = {"HARNESSRL_TASK": str(inputs / "task.json"), "HARNESSRL_WORKDIR": str(workdir.absolute()),
               "HARNESSRL_ANSWER": str(inputs / "answer.txt"),
               "HARNESSRL_EXIT_CODE": "" if exit_code is None else str(exit_code),
               "HOME": str(scratch), "LANG": "C.UTF-8", "PATH": f"{tools}:{SYSTEM_PATH}"}
        spec = grader_spec(run, scratch, workdir, env, inputs=(inputs, tools))
        grant(scratch, spec.uid, spec.gid)
        result = run_command(spec, non_dumpable_argv(run.command, sys.executable), timeout_s=run.timeout_s,
                             max_output_bytes=run.max_output_bytes)
    if result.timed_out:
        raise GraderVerdictError(f"the grader took longer than {run.timeout_s:g} s on this attempt")
    if result.dropped_bytes:
        raise GraderVerdictError(f"the grader's output is over {run.max_output_bytes} bytes on this attempt")
    if result.returncode != 0:
        raise GraderVerdictError(f"the grader exited with status {result.returncode}: {tail(result.output)}")
    return parse_verdict(result.output, run.reward_range)


def read_only_inputs(root: Path, task: dict[str, Any], answer: str) -> tuple[Path, Path, Path]:
    """(inputs, tools, scratch) under `root`: the task and the answer as 0444 files in a 0555 folder, the agent-run
    tool in another, both the caller's (root's) and bound read-only; scratch empty, for the grader to own."""
    inputs, tools, scratch = root / "inputs", root / "tools", root / "scratch"
    for folder in (inputs, tools, scratch):
        folder.mkdir()
    (inputs / "task.json").write_text(json.dumps(task))
    (inputs / "answer.txt").write_text(answer)
    (tools / AGENT_RUN).write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -I '
                                   f'{shlex.quote(str(AGENT_RUN_SCRIPT))} "$@"\n')
    for path in (inputs / "task.json", inputs / "answer.txt"):
        path.chmod(0o444)
    (tools / AGENT_RUN).chmod(0o555)
    for folder in (root, inputs, tools):
        folder.chmod(0o555 if folder != root else 0o755)
    return inputs, tools, scratch


def tail(output: str, chars: int = 500) -> str:
    """The output's last `chars` characters, for a reason."""
    text = output.strip()
    return text[-chars:] if text else "(no output)"


def parse_verdict(output: str, reward_range: tuple[float, float] = (0.0, 1.0)) -> tuple[float, dict[str, Any]]:
    """The reward document on the last non-empty line (split at "\n" only: a U+2028 the grader echoed from the answer
    does not split it): {"reward": number within `reward_range`, "details": {...}}."""
    lines = [line for line in output.split("\n") if line.strip()]
    if not lines:
        raise GraderVerdictError("the grader printed no verdict (its last line must be "
                                 '{"reward": <number>, "details": {...}})')
    try:
        verdict = json.loads(lines[-1])
    except ValueError as error:
        raise GraderVerdictError(f"the grader's last line is not JSON ({error}): {lines[-1][:300]!r}") from error
    if not isinstance(verdict, dict) or set(verdict) - {"reward", "details"}:
        raise GraderVerdictError(f"the grader's verdict must be an object with keys reward and details, got "
                                 f"{lines[-1][:300]!r}")
    reward, details = verdict.get("reward"), verdict.get("details", {})
    if isinstance(reward, bool) or not isinstance(reward, int | float) or not math.isfinite(reward):
        raise GraderVerdictError(f"the grader's reward must be a finite number, got {reward!r}")
    low, high = reward_range
    if not low <= reward <= high:
        raise GraderVerdictError(f"the grader's reward {reward!r} is outside the recipe's reward_range [{low:g}, "
                                 f"{high:g}]: fix the grader or the range")
    if not isinstance(details, dict):
        raise GraderVerdictError(f"the grader's details must be an object, got {type(details).__name__}")
    return float(reward), details
