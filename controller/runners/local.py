"""LocalRunner: each harness attempt runs in a hardened sandbox of its own (package `sandbox`), on this machine.

The harness runs as an unprivileged uid of its own, in its own namespaces, seeing only its working directory
(read-write), the interpreter and its own code (read-only), and its rollout's gateway path through a loopback port.
If the sandbox cannot be built the attempt fails to start (an infra failure, retried), never runs unsandboxed.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from controller.runners.base import RunnerFullError, RunnerStartError, RunResult, RunSpec, Termination
from controller.runners.harness_sandbox import HarnessSandbox, gateway_target, harness_spec, inside_base_url
from sandbox import NETWORK_ALLOWED_MESSAGE, SandboxError, grant, kill, start, terminate
from sandbox.forwarder import GatewayForwarder

DEFAULT_PASSTHROUGH_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR")
SIGNAL_EXIT_BASE = 128  # the sandbox reports a harness killed by signal N as exit status 128 + N
log = logging.getLogger(__name__)


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
    uid: int  # the sandbox uid of this attempt
    forwarder: GatewayForwarder | None  # its gateway route (None when the network is allowed)
    started_s: float  # time.monotonic() at start
    deadline_s: float  # monotonic deadline
    term_sent_s: float | None = None  # when SIGTERM went to the processes inside
    reason: Termination | None = None  # set when the runner itself stopped the attempt


class LocalRunner:
    """A bounded pool of sandboxed harnesses.

    An attempt is stopped with SIGTERM to every process in its sandbox, then SIGKILL of the sandbox after
    `kill_grace_s`, on timeout or cancel; when the harness process ends, whatever it left (daemons) dies with its
    PID namespace.
    """

    def __init__(self, concurrency: int, *, kill_grace_s: float = 5.0,
                 passthrough_env: Sequence[str] = DEFAULT_PASSTHROUGH_ENV,
                 sandbox: HarnessSandbox | None = None) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.concurrency = concurrency
        self.kill_grace_s = kill_grace_s
        self.passthrough_env = tuple(passthrough_env)
        self.sandbox = sandbox or HarnessSandbox()
        if self.sandbox.allow_network:
            log.warning("LocalRunner: %s", NETWORK_ALLOWED_MESSAGE)
        self._running: dict[str, _Running] = {}
        self._ended: set[str] = set()  # ended attempts not yet released
        self._sockets = Path(tempfile.mkdtemp(prefix="harnessrl-gw-"))  # the gateway routes' unix sockets
        self._sockets.chmod(0o711)
        weakref.finalize(self, shutil.rmtree, self._sockets, True)  # removed with the runner if never closed

    def free_slots(self) -> int:
        """Slots left in the pool."""
        return self.concurrency - len(self._running)

    def start(self, spec: RunSpec) -> None:
        """Start the harness in its sandbox with stdout/stderr to the log files; RunnerStartError if it cannot."""
        self._sockets.mkdir(mode=0o711, exist_ok=True)  # again after close()
        if self.free_slots() <= 0:
            raise RunnerFullError(f"all {self.concurrency} slots are busy; {spec.rollout_id!r} was not started")
        if spec.rollout_id in self._running or spec.rollout_id in self._ended:
            raise RunnerFullError(f"{spec.rollout_id!r} is already held by this runner; release it first")
        program = Path(spec.command[0]) if spec.command else Path()
        if not spec.command or (program.is_absolute() and not os.access(program, os.X_OK)):
            raise RunnerStartError(f"cannot start {spec.command[:1]!r}: not an executable file")
        uid = self._free_uid()
        env = harness_env(spec, self.passthrough_env, os.environ)
        forwarder = None if self.sandbox.allow_network else self._route(spec, uid, env)
        spec.stdout_path.parent.mkdir(parents=True, exist_ok=True)
        spec.stderr_path.parent.mkdir(parents=True, exist_ok=True)
        logs = (open(spec.stdout_path, "ab"), open(spec.stderr_path, "ab"))  # noqa: SIM115 - closed on exit
        try:
            grant(spec.workdir, uid, uid)
            sandbox_spec = harness_spec(spec, env, policy=self.sandbox, uid=uid,
                                        socket=self._socket_path(uid), python=Path(sys.executable))
            proc = start(sandbox_spec, list(spec.command), stdout=logs[0], stderr=logs[1])
        except (SandboxError, OSError, ValueError) as exc:
            for log_file in logs:
                log_file.close()
            if forwarder is not None:
                forwarder.close()
            raise RunnerStartError(f"cannot start {spec.command[0]!r} sandboxed in {spec.workdir}: {exc}") from exc
        now = time.monotonic()
        self._running[spec.rollout_id] = _Running(spec, proc, logs, uid, forwarder, now, now + spec.timeout_s)

    def _free_uid(self) -> int:
        """A uid of its own per slot as root; a controller that is not root can only sandbox as itself."""
        if os.geteuid() != 0:
            return os.geteuid()
        used = {run.uid for run in self._running.values()}
        return next(self.sandbox.first_uid + slot for slot in range(self.concurrency + 1)
                    if self.sandbox.first_uid + slot not in used)

    def _socket_path(self, uid: int) -> Path:
        return self._sockets / f"{uid}.sock"

    def _route(self, spec: RunSpec, uid: int, env: dict[str, str]) -> GatewayForwarder:
        """Start the attempt's gateway route and point its OPENAI_BASE_URL at the in-sandbox end."""
        target = gateway_target(spec)
        env["OPENAI_BASE_URL"] = inside_base_url(target, self.sandbox)
        try:
            return GatewayForwarder(self._socket_path(uid), target.host, target.port, spec.rollout_id)
        except OSError as exc:
            raise RunnerStartError(f"cannot open the gateway route of {spec.rollout_id!r}: {exc}") from exc

    def poll(self) -> list[RunResult]:
        """Ended attempts; sends SIGTERM to sandboxes past their deadline and SIGKILL past the grace period."""
        ended = []
        now = time.monotonic()
        for rollout_id, run in list(self._running.items()):
            code = run.proc.poll()
            if code is None:
                if run.reason is None and now >= run.deadline_s:
                    self._stop(run, Termination.TIMED_OUT, now)
                elif run.term_sent_s is not None and now >= run.term_sent_s + self.kill_grace_s:
                    kill(run.proc)
                continue
            ended.append(self._finish(rollout_id, run, code, now))
        return ended

    def _finish(self, rollout_id: str, run: _Running, code: int, now: float) -> RunResult:
        del self._running[rollout_id]
        kill(run.proc)  # the sandbox is gone with its harness; this makes sure
        for log_file in run.logs:
            log_file.close()
        if run.forwarder is not None:
            run.forwarder.close()
        self._ended.add(rollout_id)
        termination, exit_code, detail = _classify_exit(code, run.reason)
        return RunResult(rollout_id, run.spec.attempt, termination, exit_code, detail, now - run.started_s)

    def extend_deadline(self, rollout_id: str, extra_s: float) -> None:
        """Push a running attempt's deadline back by `extra_s` (time its calls were held by a paused gateway)."""
        run = self._running.get(rollout_id)
        if run is not None and run.reason is None:
            run.deadline_s += extra_s

    def cancel(self, rollout_id: str) -> None:
        """SIGTERM the attempt's processes now (SIGKILL follows after the grace period)."""
        run = self._running.get(rollout_id)
        if run is not None and run.reason is None:
            self._stop(run, Termination.CANCELLED, time.monotonic())

    def _stop(self, run: _Running, reason: Termination, now: float) -> None:
        run.reason = reason
        run.term_sent_s = now
        terminate(run.proc)

    def release(self, rollout_id: str) -> None:
        """Forget an ended attempt (its sandbox died when it ended; the reconciler removes the workdir)."""
        self._ended.discard(rollout_id)

    def close(self) -> None:
        """Kill every running sandbox, wait for them, and release all."""
        for run in self._running.values():
            run.reason = run.reason or Termination.CANCELLED
            kill(run.proc)
        for rollout_id, run in list(self._running.items()):
            run.proc.wait()
            self._finish(rollout_id, run, run.proc.returncode, time.monotonic())
        self._ended.clear()
        shutil.rmtree(self._sockets, ignore_errors=True)


def _classify_exit(code: int, reason: Termination | None) -> tuple[Termination, int | None, str]:
    if reason is not None:
        return reason, None, f"stopped by the runner ({reason}); exit status {code}"
    signum = -code if code < 0 else code - SIGNAL_EXIT_BASE if code > SIGNAL_EXIT_BASE else 0
    if signum in signal.valid_signals() and signum > 0:
        return Termination.CRASHED, None, f"killed by signal {signal.Signals(signum).name}"
    if code < 0:
        return Termination.CRASHED, None, f"killed by signal {-code}"
    return Termination.EXITED, code, f"exited with code {code}"
