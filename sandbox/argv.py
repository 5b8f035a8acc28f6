"""build_argv: the command line that runs a command inside a sandbox (pure: nothing is started here).

As root: `prlimit` (limits) → `bwrap` (new PID, mount, IPC, UTS, cgroup and network namespaces; a new root of
read-only binds, a fresh /proc, /dev and /tmp; the working directory read-write) → `setpriv` (the sandbox's uid and
gid, no groups, no capabilities, no new privileges) → the command. As an unprivileged user (a sandbox inside a sandbox,
e.g. a harness sandboxing its agent's commands): the same, with bwrap's own user namespace (user namespaces disabled
inside) instead of setpriv; such a caller can only sandbox as itself.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from sandbox.errors import SandboxError
from sandbox.spec import LOOPBACK_INSIDE, SOCKET_INSIDE, Network, SandboxSpec

LOOPBACK_SCRIPT = Path(__file__).with_name("loopback.py")  # the in-sandbox relay, bound at LOOPBACK_INSIDE
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
TOP_LEVEL = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # symlinks into /usr, or directories
# What of /etc a program needs to run (users, dynamic linker, TLS roots, time zone); nothing secret.
ETC_FILES = ("passwd", "group", "nsswitch.conf", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "ssl",
             "ca-certificates", "ca-certificates.conf", "localtime", "mime.types", "os-release", "hosts")


def tool(name: str) -> str:
    """The absolute path of a host tool (the bare name when it is not installed: the probe reports that)."""
    return shutil.which(name, path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin") or name


@cache
def system_mounts() -> tuple[str, ...]:
    """bwrap arguments for the system part of the new root: /usr and the top-level links read-only, a few /etc files."""
    args = ["--ro-bind", "/usr", "/usr", "--perms", "0555", "--dir", "/etc"]
    for top in TOP_LEVEL:
        path = Path(top)
        if path.is_symlink():
            args += ["--symlink", str(path.readlink()), top]
        elif path.is_dir():
            args += ["--ro-bind", top, top]
    for name in ETC_FILES:
        if (Path("/etc") / name).exists():
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    return tuple(args)


def prlimit_args(spec: SandboxSpec) -> list[str]:
    """`prlimit` with the spec's limits (soft = hard, so nothing inside can raise them)."""
    limits = spec.limits
    return [tool("prlimit"), f"--nproc={limits.processes}", f"--as={limits.memory_bytes}", f"--cpu={limits.cpu_s}",
            f"--fsize={limits.file_bytes}", f"--nofile={limits.open_files}", "--core=0", "--"]


def namespace_args(spec: SandboxSpec, as_root: bool) -> list[str]:
    """New namespaces for everything; the network one unless the network is allowed; a user one when not root."""
    args = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", spec.hostname,
            "--die-with-parent", "--new-session"]
    if spec.network != Network.HOST:
        args.append("--unshare-net")
    if not as_root:
        args += ["--unshare-user", "--disable-userns", "--uid", str(spec.uid), "--gid", str(spec.gid)]
    return args


def mount_args(spec: SandboxSpec, as_root: bool) -> list[str]:
    """The new root: system, /proc, /dev, a sized /tmp, the read-only binds, then the read-write ones.

    Inside a sandbox (not root) the kernel refuses a new /proc (the outer one has read-only overmounts): the outer
    /proc is bound read-only; its processes stay unreachable (another PID namespace) and unreadable (run the outer
    program non-dumpable: prctl PR_SET_DUMPABLE 0)."""
    proc = ["--proc", "/proc"] if as_root else ["--ro-bind", "/proc", "/proc"]
    args = [*system_mounts(), *proc, "--dev", "/dev",
            "--perms", "1777", "--size", str(spec.limits.tmp_bytes), "--tmpfs", "/tmp"]
    readonly = list(dict.fromkeys(spec.readonly))
    inside = [SOCKET_INSIDE, LOOPBACK_INSIDE] if spec.gateway is not None else []
    args += parent_dirs([*readonly, spec.writable, *spec.scratch, *inside])
    for path in readonly:
        args += ["--ro-bind", str(path), str(path)]
    for path in (spec.writable, *spec.scratch):
        args += ["--bind", str(path), str(path)]
    if spec.gateway is not None:
        args += ["--ro-bind", str(spec.gateway.socket), str(SOCKET_INSIDE),
                 "--ro-bind", str(LOOPBACK_SCRIPT), str(LOOPBACK_INSIDE)]
    return [*args, "--chdir", str(spec.writable)]


def parent_dirs(paths: list[Path]) -> list[str]:
    """Traversable, unwritable (0555) empty directories for the parents of bind targets (bwrap would make them 0700,
    and owned by the sandbox user in a sandbox inside a sandbox)."""
    bound = set(paths)
    parents = sorted({parent for path in paths for parent in path.parents if parent != Path("/")},
                     key=lambda parent: len(parent.parts))
    args = []
    for parent in parents:
        if parent.parts[1] in ("usr", "proc", "dev") or any(p in bound for p in (parent, *parent.parents)):
            continue
        args += ["--perms", "0555", "--dir", str(parent)]
    return args


def env_args(spec: SandboxSpec) -> list[str]:
    """The command's whole environment: bwrap starts from an empty one."""
    env = {"PATH": DEFAULT_PATH, "USER": "sandbox", "LOGNAME": "sandbox", **spec.env}  # no passwd entry needed
    args = ["--clearenv"]
    for name, value in env.items():
        args += ["--setenv", name, value]
    return args


@dataclass(frozen=True)
class Launch:
    """The parts of a sandbox's command line: `launcher` (ends with bwrap), bwrap's `options`, then after `--` the
    `inside` command (privilege drop, gateway relay, the command)."""

    launcher: tuple[str, ...]  # prlimit ... bwrap
    options: tuple[str, ...]  # bwrap's options: namespaces, the new root, the environment
    inside: tuple[str, ...]  # what bwrap runs

    def argv(self) -> list[str]:
        """The whole command line."""
        return [*self.launcher, *self.options, "--", *self.inside]


def build_launch(spec: SandboxSpec, argv: Sequence[str], *, caller_uid: int = 0) -> Launch:
    """The command line that runs `argv` inside the sandbox of `spec`, in parts (see build_argv)."""
    if not argv:
        raise ValueError("nothing to run: argv is empty")
    as_root = caller_uid == 0
    if not as_root and caller_uid != spec.uid:
        raise SandboxError(f"a process of uid {caller_uid} can only sandbox commands as itself, not as uid "
                           f"{spec.uid}: set the spec's uid to {caller_uid}, or start the sandbox as root")
    command = list(argv)
    if spec.gateway is not None:
        command = [str(spec.gateway.python), "-I", "-S", str(LOOPBACK_INSIDE), str(spec.gateway.port),
                   str(SOCKET_INSIDE), "--", *command]
    drop = [] if not as_root else [tool("setpriv"), "--reuid", str(spec.uid), "--regid", str(spec.gid),
                                   "--clear-groups", "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
    options = [*namespace_args(spec, as_root), *mount_args(spec, as_root), *env_args(spec)]
    return Launch(launcher=(*prlimit_args(spec), tool("bwrap")), options=tuple(options), inside=(*drop, *command))


def build_argv(spec: SandboxSpec, argv: Sequence[str], *, caller_uid: int = 0) -> list[str]:
    """The argv that runs `argv` inside the sandbox of `spec`, started by a process of uid `caller_uid`."""
    return build_launch(spec, argv, caller_uid=caller_uid).argv()
