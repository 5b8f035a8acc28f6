"""LocalRunner: each harness attempt is a process group of its own, in its own working directory, on this machine."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from controller.runners.base import RunnerFullError, RunnerStartError, RunResult, RunSpec, Termination

DEFAULT_PASSTHROUGH_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR")


def harness_env(spec: RunSpec, passthrough: Sequence[str], source: Mapping[str, str]) -> dict[str, str]:
    """The harness's whole environment: the contract, an allow-list copied from `source`, and `spec.extra_env`.

    Nothing else of the controller's environment (its admin and grader tokens above all) reaches the harness.
    """
    env = {name: source[name] for name in passthrough if name in source}
    env.update(spec.extra_env)
    env.update({"OPENAI_BASE_URL": spec.base_url, "OPENAI_API_KEY": spec.api_key,
                "HARNESSRL_TASK": str(spec.workdir / "task.json"), "HOME": str(spec.workdir)})
    return env


@dataclass
class _Running:
    spec: RunSpec
    proc: subprocess.Popen
    logs: tuple[IO[bytes], IO[bytes]]
    started_s: float  # time.monotonic() at start
    deadline_s: float  # monotonic deadline
    term_sent_s: float | None = None  # when SIGTERM went to the group
    reason: Termination | None = None  # set when the runner itself stopped the attempt


class LocalRunner:
    """A bounded pool of harness process groups.

    A group is stopped with SIGTERM, then SIGKILL after `kill_grace_s`, on timeout or cancel; whatever is left in the
    group when the harness process ends (daemons it forked) is SIGKILLed at once.
    """

    def __init__(self, concurrency: int, *, kill_grace_s: float = 5.0,
                 passthrough_env: Sequence[str] = DEFAULT_PASSTHROUGH_ENV) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.concurrency = concurrency
        self.kill_grace_s = kill_grace_s
        self.passthrough_env = tuple(passthrough_env)
        self._running: dict[str, _Running] = {}
        self._ended: set[str] = set()  # ended attempts not yet released

    def free_slots(self) -> int:
        """Slots left in the pool."""
        return self.concurrency - len(self._running)

    def start(self, spec: RunSpec) -> None:
        """Start the harness in a new session (its own process group) with stdout/stderr to the log files."""
        if self.free_slots() <= 0:
            raise RunnerFullError(f"all {self.concurrency} slots are busy; {spec.rollout_id!r} was not started")
        if spec.rollout_id in self._running or spec.rollout_id in self._ended:
            raise RunnerFullError(f"{spec.rollout_id!r} is already held by this runner; release it first")
        spec.stdout_path.parent.mkdir(parents=True, exist_ok=True)
        spec.stderr_path.parent.mkdir(parents=True, exist_ok=True)
        logs = (open(spec.stdout_path, "ab"), open(spec.stderr_path, "ab"))  # noqa: SIM115 - closed on exit
        try:
            proc = subprocess.Popen(list(spec.command), cwd=spec.workdir, stdin=subprocess.DEVNULL,
                                    stdout=logs[0], stderr=logs[1], start_new_session=True,
                                    env=harness_env(spec, self.passthrough_env, os.environ))
        except OSError as exc:
            for log in logs:
                log.close()
            raise RunnerStartError(f"cannot start {spec.command[0]!r} in {spec.workdir}: {exc}") from exc
        now = time.monotonic()
        self._running[spec.rollout_id] = _Running(spec, proc, logs, now, now + spec.timeout_s)

    def poll(self) -> list[RunResult]:
        """Ended attempts; sends SIGTERM to groups past their deadline and SIGKILL past the grace period."""
        ended = []
        now = time.monotonic()
        for rollout_id, run in list(self._running.items()):
            code = run.proc.poll()
            if code is None:
                if run.reason is None and now >= run.deadline_s:
                    self._stop(run, Termination.TIMED_OUT, now)
                elif run.term_sent_s is not None and now >= run.term_sent_s + self.kill_grace_s:
                    _signal_group(run.proc.pid, signal.SIGKILL)
                continue
            ended.append(self._finish(rollout_id, run, code, now))
        return ended

    def _finish(self, rollout_id: str, run: _Running, code: int, now: float) -> RunResult:
        del self._running[rollout_id]
        _signal_group(run.proc.pid, signal.SIGKILL)  # what the harness left in its group dies with it
        for log in run.logs:
            log.close()
        self._ended.add(rollout_id)
        termination, exit_code, detail = _classify_exit(code, run.reason)
        return RunResult(rollout_id, run.spec.attempt, termination, exit_code, detail, now - run.started_s)

    def cancel(self, rollout_id: str) -> None:
        """SIGTERM the attempt's group now (SIGKILL follows after the grace period)."""
        run = self._running.get(rollout_id)
        if run is not None and run.reason is None:
            self._stop(run, Termination.CANCELLED, time.monotonic())

    def _stop(self, run: _Running, reason: Termination, now: float) -> None:
        run.reason = reason
        run.term_sent_s = now
        _signal_group(run.proc.pid, signal.SIGTERM)

    def release(self, rollout_id: str) -> None:
        """Forget an ended attempt (its group was killed when it ended; the reconciler removes the workdir)."""
        self._ended.discard(rollout_id)

    def close(self) -> None:
        """Kill every running group, wait for them, and release all."""
        for run in self._running.values():
            run.reason = run.reason or Termination.CANCELLED
            _signal_group(run.proc.pid, signal.SIGKILL)
        for rollout_id, run in list(self._running.items()):
            run.proc.wait()
            self._finish(rollout_id, run, run.proc.returncode, time.monotonic())
        self._ended.clear()


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is already gone
        os.killpg(pgid, signum)


def _classify_exit(code: int, reason: Termination | None) -> tuple[Termination, int | None, str]:
    if reason is not None:
        return reason, None, f"stopped by the runner ({reason}); exit status {code}"
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        return Termination.CRASHED, None, f"killed by signal {name}"
    return Termination.EXITED, code, f"exited with code {code}"
