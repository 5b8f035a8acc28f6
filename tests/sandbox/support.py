"""Helpers of the sandbox tests: a working directory the sandbox user owns, specs, the host's processes of a uid."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

from sandbox import Limits, SandboxSpec, grant
from sandbox.paths import interpreter_paths

_UIDS = itertools.count(61000 + (os.getpid() % 500) * 8)


def fresh_uid() -> int:
    """An unprivileged uid no other test (or xdist worker) uses: its processes can be counted on the host."""
    return next(_UIDS)


def workdir(tmp_path: Path, name: str, uid: int) -> Path:
    """`tmp_path/name`, owned by `uid`."""
    path = tmp_path / name
    path.mkdir(parents=True, exist_ok=True)
    grant(path, uid, uid)
    return path


def python_spec(tmp_path: Path, *, uid: int | None = None, name: str = "work", **kwargs) -> SandboxSpec:
    """A spec that can run this interpreter, writable `tmp_path/name`, its own uid."""
    uid = fresh_uid() if uid is None else uid
    kwargs.setdefault("limits", Limits(processes=64))
    env = {"HOME": str(tmp_path / name), **kwargs.pop("env", {})}
    return SandboxSpec(writable=workdir(tmp_path, name, uid), readonly=interpreter_paths(), uid=uid, gid=uid,
                       env=env, **kwargs)


def host_processes_of(uid: int) -> list[int]:
    """Host pids of live processes owned by `uid`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("Uid", "").split()[:1] == [str(uid)] and fields.get("State", "").split()[:1] != ["Z"]:
            pids.append(int(entry.name))
    return pids


def wait_no_processes(uid: int, timeout_s: float = 3.0) -> list[int]:
    """Wait until `uid` owns no process on the host; returns those still alive at the end."""
    deadline = time.monotonic() + timeout_s
    while (left := host_processes_of(uid)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left
