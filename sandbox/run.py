"""Run commands in a sandbox (effectful): start one, or run one to its end with a time limit and capped output.

The sandbox's processes live in their own PID namespace under bwrap with --die-with-parent: killing the bwrap
process this module started (SIGKILL) ends every process inside, daemons and double forks included.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import selectors
import signal
import subprocess
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sandbox.argv import Launch, build_launch
from sandbox.errors import SandboxError
from sandbox.probe import ensure_available
from sandbox.rlimits import within_current_limits
from sandbox.spec import SandboxSpec

READ_CHUNK_BYTES = 1 << 20
PIPE_BYTES = 1 << 20  # asked of the kernel for the output pipe (fewer, larger reads)
DEFAULT_MAX_OUTPUT_BYTES = 1 << 20
HOST_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}  # the launchers' own environment


@dataclass(frozen=True)
class CommandResult:
    """What one sandboxed command did."""

    output: str  # stdout and stderr, interleaved; its middle dropped past the output cap
    returncode: int  # the exit status (-9 after a timeout kill)
    timed_out: bool  # whether the command was killed for running past its time limit
    dropped_bytes: int = 0  # output bytes not kept (over the cap)


def start(spec: SandboxSpec, argv: Sequence[str], *, stdout: int | IO[bytes] | None = subprocess.PIPE,
          stderr: int | IO[bytes] | None = subprocess.STDOUT) -> subprocess.Popen:
    """Start `argv` in the sandbox (a new session of its own); raises SandboxError when it cannot be built."""
    ensure_available()
    spec = dataclasses.replace(spec, limits=within_current_limits(spec.limits))
    launch = build_launch(spec, argv, caller_uid=os.geteuid())
    launcher, args_fd = _options_through_fd(launch)
    try:
        return subprocess.Popen(launcher, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, env=HOST_ENV,
                                start_new_session=True, pass_fds=(args_fd,))
    except OSError as exc:
        raise SandboxError(f"cannot start the sandbox launcher {launch.launcher[0]!r}: {exc}") from exc
    finally:
        os.close(args_fd)


def _options_through_fd(launch: Launch) -> tuple[list[str], int]:
    """bwrap's options (the environment among them) moved into a memfd read with `--args`: the command line of the
    sandbox's PID 1, which every process inside can read, then shows no variable's value."""
    fd = os.memfd_create("bwrap-args", 0)
    os.write(fd, b"".join(arg.encode() + b"\0" for arg in launch.options))
    os.lseek(fd, 0, os.SEEK_SET)
    return [*launch.launcher, "--args", str(fd), "--", *launch.inside], fd


def kill(process: subprocess.Popen) -> None:
    """SIGKILL the sandbox (bwrap and its session): its PID namespace, and so everything inside, goes with it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        process.kill()


def descendants(pid: int) -> list[int]:
    """Host pids of every process below `pid` (children first), from /proc/<pid>/task/*/children."""
    found: list[int] = []
    pending = [pid]
    while pending:
        parent = pending.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                children = [int(child) for child in Path(f"/proc/{parent}/task/{task}/children").read_text().split()]
            except (OSError, ValueError):
                continue
            found += children
            pending += children
    return found


def terminate(process: subprocess.Popen, signum: signal.Signals = signal.SIGTERM) -> None:
    """Send `signum` to every process inside the sandbox (not to bwrap: that would kill them all at once)."""
    for pid in descendants(process.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


class CappedOutput:
    """Keeps the first and the last `max_bytes // 2` bytes of a stream and counts what it drops."""

    def __init__(self, max_bytes: int) -> None:
        self.head_limit = max_bytes // 2
        self.tail_limit = max_bytes - self.head_limit
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_bytes = 0
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        self.tail.append(chunk)
        self.tail_bytes += len(chunk)
        while self.tail_bytes - len(self.tail[0]) >= self.tail_limit:
            self.tail_bytes -= len(first := self.tail.popleft())
            self.dropped += len(first)

    def text(self) -> str:
        tail = b"".join(self.tail)
        extra = max(0, len(tail) - self.tail_limit)
        self.dropped, tail = self.dropped + extra, tail[extra:]
        marker = f"\n[... {self.dropped} bytes of output dropped ...]\n".encode() if self.dropped else b""
        return (bytes(self.head) + marker + tail).decode("utf-8", errors="replace")


def run_command(spec: SandboxSpec, argv: Sequence[str], timeout_s: float,
                max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> CommandResult:
    """Run `argv` in the sandbox to its end or `timeout_s`, keeping at most `max_output_bytes` of its output."""
    process = start(spec, argv)
    assert process.stdout is not None
    with contextlib.suppress(OSError):
        fcntl.fcntl(process.stdout.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    output = CappedOutput(max_output_bytes)
    deadline = time.monotonic() + timeout_s
    timed_out = _pump(process.stdout, output, deadline)
    if timed_out:
        kill(process)
        _pump(process.stdout, output, time.monotonic() + 5.0)
    process.stdout.close()
    returncode = process.wait()
    return CommandResult(output=output.text(), returncode=-9 if timed_out else returncode, timed_out=timed_out,
                         dropped_bytes=output.dropped)


def run_in_container(argv: Sequence[str], *, cwd: Path, env: dict[str, str], timeout_s: float,
                     max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> CommandResult:
    """Run `argv` where the container is the sandbox (a Kubernetes agent pod: no capabilities, no store, no token, a
    NetworkPolicy; no user namespaces for bwrap): a session of its own with the same time limit and output cap, its
    process group killed when it ends (a daemon that called setsid lives on until the pod ends). Not a sandbox by
    itself: only for callers already inside one."""
    try:
        process = subprocess.Popen(list(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as exc:
        raise SandboxError(f"cannot start {argv[0]!r} in {cwd}: {exc}") from exc
    assert process.stdout is not None
    output = CappedOutput(max_output_bytes)
    timed_out = _pump(process.stdout, output, time.monotonic() + timeout_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # the command's group: what it left running in the background too
    if timed_out:
        _pump(process.stdout, output, time.monotonic() + 5.0)
    process.stdout.close()
    returncode = process.wait()
    return CommandResult(output=output.text(), returncode=-9 if timed_out else returncode, timed_out=timed_out,
                         dropped_bytes=output.dropped)


def _pump(stream: IO[bytes], output: CappedOutput, deadline: float) -> bool:
    """Read `stream` into `output` until EOF (False) or `deadline` (True)."""
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not selector.select(timeout=left):
                continue
            chunk = os.read(stream.fileno(), READ_CHUNK_BYTES)
            if not chunk:
                return False
            output.add(chunk)
    return True


def grant(path: Path, uid: int, gid: int) -> None:
    """Give the sandbox's user a tree it must write (as root; a no-op for a caller that is that user already)."""
    if os.geteuid() != 0:
        return
    for root, dirs, files in os.walk(path):
        os.lchown(root, uid, gid)
        for name in (*dirs, *files):
            os.lchown(os.path.join(root, name), uid, gid)
