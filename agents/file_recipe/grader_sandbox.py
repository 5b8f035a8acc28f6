"""A recipe file's grader command, run outside the harness's sandbox in a hardened sandbox of its own.

The grader reads what the policy wrote, so it runs like `agents/swe/agent_diff.py`'s diff: an unprivileged uid of its
own (files the agent made unreadable stay unreadable), no network, limits on memory, processes, CPU time, wall time
and output, and only these paths: the interpreter, the recipe's folder and the finished working directory, read-only,
and a scratch directory of its own as the current directory, holding the task (written from the rollout's input, not
the working directory's copy the harness could have changed) and the final answer (from the gateway's records). Its
environment: HARNESSRL_TASK, HARNESSRL_WORKDIR, HARNESSRL_ANSWER, HARNESSRL_EXIT_CODE, HOME, LANG, PATH.

Its verdict is the last non-empty line of its output: a JSON object with a number `reward` and an optional object
`details`. Anything else (no such line, a crash, a timeout, an output past the cap) is `GraderVerdictError`: the
attempt's failure with the reason (reward 0, like any grader exception; see controller/report.py). A sandbox that
cannot be built is `SandboxError`: the grader's own infrastructure (infra, retried).
"""

from __future__ import annotations

import json
import math
import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox import Limits, Network, SandboxSpec, grant, run_command
from sandbox.paths import interpreter_paths
from sandbox.rlimits import within_current_limits

GRADER_UIDS = range(270_000, 335_536)  # above agents.swe.testrun's graders and the local runner's harness uids
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


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


def grader_spec(run: GraderRun, scratch: Path, workdir: Path, env: dict[str, str]) -> SandboxSpec:
    """The grader's sandbox: `scratch` as the writable cwd; the interpreter, the recipe folder and the working
    directory read-only; no network."""
    uid = GRADER_UIDS[secrets.randbelow(len(GRADER_UIDS))] if os.geteuid() == 0 else os.geteuid()
    limits = Limits(processes=64, memory_bytes=run.memory_bytes, cpu_s=max(1, math.ceil(run.timeout_s)),
                    file_bytes=64 << 20, tmp_bytes=64 << 20)
    return SandboxSpec(writable=scratch.resolve(), readonly=(*interpreter_paths(), run.folder, workdir.absolute()),
                       uid=uid, gid=uid, network=Network.NONE, limits=within_current_limits(limits), env=env)


def run_grader(run: GraderRun, task: dict[str, Any], workdir: Path, answer: str,
               exit_code: int | None) -> tuple[float, dict[str, Any]]:
    """(reward, details) from the grader's last output line; GraderVerdictError when there is none."""
    with tempfile.TemporaryDirectory(prefix="harnessrl-file-grader-") as tmp:
        scratch = Path(tmp)
        (scratch / "task.json").write_text(json.dumps(task))
        (scratch / "answer.txt").write_text(answer)
        env = {"HARNESSRL_TASK": str(scratch.resolve() / "task.json"), "HARNESSRL_WORKDIR": str(workdir.absolute()),
               "HARNESSRL_ANSWER": str(scratch.resolve() / "answer.txt"),
               "HARNESSRL_EXIT_CODE": "" if exit_code is None else str(exit_code),
               "HOME": str(scratch.resolve()), "LANG": "C.UTF-8", "PATH": SYSTEM_PATH}
        spec = grader_spec(run, scratch, workdir, env)
        grant(scratch, spec.uid, spec.gid)
        result = run_command(spec, list(run.command), timeout_s=run.timeout_s, max_output_bytes=run.max_output_bytes)
    if result.timed_out:
        raise GraderVerdictError(f"the grader took longer than {run.timeout_s:g} s on this attempt")
    if result.dropped_bytes:
        raise GraderVerdictError(f"the grader's output is over {run.max_output_bytes} bytes on this attempt")
    if result.returncode != 0:
        raise GraderVerdictError(f"the grader exited with status {result.returncode}: {tail(result.output)}")
    return parse_verdict(result.output)


def tail(output: str, chars: int = 500) -> str:
    """The output's last `chars` characters, for a reason."""
    text = output.strip()
    return text[-chars:] if text else "(no output)"


def parse_verdict(output: str) -> tuple[float, dict[str, Any]]:
    """The reward document on the last non-empty line: {"reward": number, "details": {...}}."""
    lines = [line for line in output.splitlines() if line.strip()]
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
    if not isinstance(details, dict):
        raise GraderVerdictError(f"the grader's details must be an object, got {type(details).__name__}")
    return float(reward), details
