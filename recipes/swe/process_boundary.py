"""The tested code in a process of its own (issue 27, point 2): pytest, the tests and the outcomes plugin run in the
trusted process (T); the repository's own modules run in a second process (U) that T starts, and T's tests reach them
through proxies over a socket (`boundary_wire`: what crosses and how). Code under test never runs in the process that
decides the verdict, so it cannot rewrite reports, assertions, test functions or the exit status: it can only answer
the calls the tests make.

T is made non-dumpable before it starts U (same uid: U cannot read or write T's memory or file descriptors through
/proc or ptrace), U inherits only its socket, and Landlock confines U's writes to its own folders (`confine_writes`).
T imports every module that would load from inside the checkout, except the patch policy's protected test files, as
`RemoteModule`s of U's (`RemoteFinder`, deciding by where T's own import system would load it, a package's `__path__`
taken from the checkout on disk, never from U), and an audit hook refuses to run the tested code in T by any other
route (`_refuse_the_tested_code`). An AssertionError or pytest failure raised in a test's callback fails
that test even when the tested code swallows it (`pytest_runtest_call`); U's warnings are re-issued in T; the verdict
guard runs in U and its exit status is passed on (`finish`).

This file and `boundary_wire.py` are copied into the grader's runner directory and run in both processes
(`python -I -B boundary.py FD RUNNER` is U's entry); they import nothing but the standard library.
"""

from __future__ import annotations

import ctypes
import fnmatch
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import types
import warnings

TAMPER_EXIT = 86  # the verdict guard's exit status (`verdict_guard.TAMPER_EXIT`), passed on by `finish`
TEST_DIRS = frozenset({"tests", "test", "testing"})  # the patch policy's (`patch_policy.TEST_DIRS`)
TEST_FILES = ("test_*.py", "*_test.py", "conftest.py")  # the patch policy's (`patch_policy.TEST_FILES`)
WIRE_MODULE = "harnessrl_boundary_wire"  # under the test runner's prefix: T never lends its own objects


def _load_wire() -> types.ModuleType:
    """`boundary_wire.py` beside this file, loaded by path (in T the repository's modules must not be found by name)."""
    if WIRE_MODULE not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            WIRE_MODULE, os.path.join(os.path.dirname(os.path.abspath(__file__)), "boundary_wire.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[WIRE_MODULE] = module
        spec.loader.exec_module(module)
    return sys.modules[WIRE_MODULE]


if __package__ == "recipes.swe":  # imported by the grader: the package's own wire, not a second copy
    from recipes.swe import boundary_wire as wire
else:  # T and U: the runner directory's copy, by path
    wire = _load_wire()


def protected(relative: str) -> bool:
    """Whether a checkout path is one the agent's diff cannot change because it is a test: under a test folder, or a
    test file or conftest by name (`patch_policy.protected_reason`'s first two rules). These load in T, pristine."""
    parts = relative.split("/")
    return bool(TEST_DIRS & {part.lower() for part in parts[:-1]}) or \
        any(fnmatch.fnmatch(parts[-1], pattern) for pattern in TEST_FILES)


class RemoteFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Every module the import system would load from inside the checkout (`root`: any sys.path entry, `src/`, a
    configured `pythonpath`, namespace folders, editable installs) is imported from U as a `RemoteModule`, unless it
    is a protected test file, which T loads from the checkout. Where it would load from is asked of the other finders
    (never of U), and a package's `__path__` is the one found on disk here, so U cannot point T's imports elsewhere."""

    def __init__(self, peer: wire.Peer, root: str, writable: str | None = None) -> None:
        self.peer, self.roots = peer, {os.path.abspath(root), os.path.realpath(root)}
        self.zones = set() if writable is None else {os.path.abspath(writable), os.path.realpath(writable)}
        self._finding = False

    def find_spec(self, name, path=None, target=None):
        if self._finding:
            return None
        self._finding = True
        try:
            spec = self._found_elsewhere(name, path, target)
            if spec is None and path:  # pytest's importlib mode asks for a package with the folder it is in as path
                spec = self._found_elsewhere(name, [os.path.dirname(str(entry)) for entry in path], target)
        finally:
            self._finding = False
        if spec is not None and self._in_zones(spec):  # an extension, a zip, a package: nothing U could have written
            raise ImportError(f"the test process loads no module from the tested code's folders ({spec.origin})")
        inside = self._inside(spec) if spec is not None else None
        if inside is None or protected(inside):
            return None
        locations = spec.submodule_search_locations
        return importlib.machinery.ModuleSpec(name, self, origin=spec.origin,  # no location: `__file__` stays U's
                                              loader_state=None if locations is None else list(locations),
                                              is_package=locations is not None)

    def _found_elsewhere(self, name, path, target):
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                return spec
        return None

    def _in_zones(self, spec) -> bool:
        places = [spec.origin or "", *(spec.submodule_search_locations or [])]
        return any(variant.startswith(zone + os.sep) for place in places if place for variant in
                   (os.path.abspath(place), os.path.realpath(place)) for zone in self.zones)

    def _inside(self, spec) -> str | None:
        """The checkout-relative path the spec would load (a package's `__init__` or a namespace folder's stand-in);
        None when it loads from outside the checkout."""
        origin = spec.origin if spec.has_location and spec.origin else None
        places = [origin] if origin else [os.path.join(place, "__init__.py")
                                          for place in (spec.submodule_search_locations or [])]
        for place in places:
            for variant in (os.path.abspath(place), os.path.realpath(place)):
                for root in self.roots:
                    if variant.startswith(root + os.sep):
                        return os.path.relpath(variant, root).replace(os.sep, "/")
        return None

    def create_module(self, spec):
        remote = self.peer.request("import", name=spec.name, path=list(sys.path))
        module = wire.RemoteModule(spec.name)
        module.__dict__[wire.REMOTE_KEY] = remote
        return module

    def exec_module(self, module) -> None:
        if module.__spec__.loader_state is not None:
            module.__path__ = module.__spec__.loader_state


PEER: wire.Peer | None = None  # T's end, once `start` ran
PYTEST_ARGS: list[str] = []  # what `start` adds to pytest's arguments (the base temporary folder)
UNAVAILABLE_EXIT = 87  # T's exit status when the boundary cannot be kept (the grader's infrastructure, not the agent)
# Landlock (Linux 5.13+): the system calls (the same numbers on x86-64 and arm64) and the write rights per ABI version.
LANDLOCK_CREATE_RULESET, LANDLOCK_ADD_RULE, LANDLOCK_RESTRICT_SELF = 444, 445, 446
WRITE_RIGHTS = {1: 1 << 1 | sum(1 << bit for bit in range(4, 13)),  # write file, remove and make anything
                2: 1 << 13, 3: 1 << 14}  # link or rename across folders; truncate
DEV_RIGHTS = {1: 1 << 1, 3: 1 << 14}  # /dev: writing to an existing device file (/dev/null)
PROCESS: subprocess.Popen | None = None  # U


def start(runner: str) -> wire.Peer:
    """In T, before the repository is importable: become non-dumpable, start U in the cwd (the repository) with only
    its socket (and the grader's `runner` directory, for the verdict guard), confined so that it writes nowhere but
    its own scratch folder and pytest's temporary folder (`confine_writes`), and import the checkout's modules from it
    from now on (`RemoteFinder`). Exits UNAVAILABLE_EXIT, naming why, when U could write the checkout."""
    try:
        return _start(runner)
    except Exception as error:  # nothing of the tested code has run yet: the grader's infrastructure, not the agent
        print(f"harnessrl process boundary: could not start the tested code's process: {error!r}", file=sys.stderr,
              flush=True)
        raise SystemExit(UNAVAILABLE_EXIT) from error


def _start(runner: str) -> wire.Peer:
    global PEER, PROCESS
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE 0
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed: the tested code could reach the runner")
    abi, here = landlock_abi(), os.getcwd()
    if abi == 0 and _owned_by_us(here):
        print("harnessrl process boundary: this kernel offers no Landlock and the checkout belongs to the test's own "
              "user, so the tested code could rewrite the tests: not graded", file=sys.stderr, flush=True)
        raise SystemExit(UNAVAILABLE_EXIT)
    scratch = tempfile.mkdtemp(prefix="harnessrl-tested-")
    os.mkdir(os.path.join(scratch, "tmp"))
    PYTEST_ARGS[:] = [f"--basetemp={os.path.join(scratch, 'pytest')}"]  # the tests' tmp_path: U may write there
    ours, theirs = socket.socketpair()
    PROCESS = subprocess.Popen(
        [sys.executable, "-I", "-B", os.path.abspath(__file__), str(theirs.fileno()), runner],
        pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, cwd=here,
        env={**os.environ, "TMPDIR": os.path.join(scratch, "tmp"), "HOME": os.path.join(scratch, "tmp")},
        preexec_fn=(lambda: confine_writes([scratch], abi)) if abi else None)
    theirs.close()
    _refuse_the_tested_code(here, scratch)
    PEER = wire.Peer(ours, guarded=True)
    sys.meta_path.insert(0, RemoteFinder(PEER, here, scratch))
    return PEER


def _refuse_the_tested_code(checkout: str, writable: str) -> None:
    """An audit hook in T (permanent): no code compiled or run here from a checkout file the patch policy does not
    protect, or from anywhere U may write (its scratch folder and pytest's, `writable`), and no bytecode or native
    library (ctypes) read from either: the loaders that bypass `RemoteFinder` (pytest's importlib import mode, doctest
    modules, `spec_from_file_location`) end in an ImportError instead of running the tested code in the test process;
    `RemoteFinder` refuses any module found in `writable` whatever its loader (an extension, a zip)."""
    checkouts = {os.path.abspath(checkout), os.path.realpath(checkout)}
    zones = {os.path.abspath(writable), os.path.realpath(writable)}

    def refused(filename, bytecode: bool) -> bool:
        places = {os.path.abspath(filename), os.path.realpath(filename)}
        if any(place.startswith(zone + os.sep) for place in places for zone in zones):
            return True
        inside = [os.path.relpath(place, root) for place in places for root in checkouts
                  if place.startswith(root + os.sep)]
        return bool(inside) and (bytecode or not all(protected(path.replace(os.sep, "/")) for path in inside))

    def hook(event: str, args: tuple) -> None:
        if event == "open" and isinstance(args[0], str) and args[0].endswith((".pyc", ".pyo")) and \
                refused(args[0], True):
            raise PermissionError(f"the test process reads no bytecode from {args[0]!r}")
        if event == "ctypes.dlopen" and isinstance(args[0], str) and os.path.isabs(args[0]) and refused(args[0], True):
            raise PermissionError(f"the test process loads no library from {args[0]!r}")
        filename = args[1] if event == "compile" else getattr(args[0], "co_filename", None) if event == "exec" else None
        if isinstance(filename, str) and os.path.isabs(filename) and refused(filename, False):  # "<string>": not a file
            raise ImportError(f"the test process does not run the tested code ({filename}); it runs in its own process")

    sys.addaudithook(hook)


def _syscalls():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none, or refused by a seccomp filter)."""
    return max(0, _syscalls().syscall(LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))


def _rights(table: dict[int, int], abi: int) -> int:
    return sum(bits for version, bits in table.items() if abi >= version)


def confine_writes(writable: list[str], abi: int) -> None:
    """In U's child before it runs anything (`preexec_fn`): writes, removals and new files only beneath `writable`
    (and writes to /dev's files), for this process and all it starts; reads are unchanged."""
    libc, handled = _syscalls(), _rights(WRITE_RIGHTS, abi)
    size = 8 if abi < 4 else 16 if abi < 6 else 24  # struct landlock_ruleset_attr grew with the ABI
    attr = ctypes.create_string_buffer(struct.pack("=QQQ", handled, 0, 0), 24)
    ruleset = libc.syscall(LANDLOCK_CREATE_RULESET, attr, ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        for path, rights in [*((place, handled) for place in writable), ("/dev", _rights(DEV_RIGHTS, abi))]:
            folder = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, folder), 12)  # path_beneath_attr, packed
                if libc.syscall(LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(1), rule,
                                ctypes.c_uint32(0)) != 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
            finally:
                os.close(folder)
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS, which Landlock requires
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if libc.syscall(LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(ruleset)


def _owned_by_us(root: str) -> bool:
    """Whether anything of the checkout belongs to this process's user (who could then change its mode and write)."""
    uid = os.getuid()
    for folder, _, files in os.walk(root):
        if any(os.lstat(os.path.join(folder, name)).st_uid == uid for name in ["", *files]):
            return True
    return False


def finish(status: int, wait_s: float = 10.0) -> int:
    """In T, after pytest: close the boundary and wait for U; the verdict guard's exit status when it ended U (the
    tests it broke failed already), else pytest's `status`."""
    if PEER is None or PROCESS is None:
        return status
    PEER.sock.close()
    try:
        PROCESS.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        PROCESS.kill()
        PROCESS.wait()
    return TAMPER_EXIT if PROCESS.returncode == TAMPER_EXIT else status


def _first_finder() -> None:
    """Keep the boundary's finder ahead of pytest's assertion-rewriting hook, which could load a module itself."""
    finders = [finder for finder in sys.meta_path if isinstance(finder, RemoteFinder)]
    for finder in finders:
        sys.meta_path.remove(finder)
    sys.meta_path[:0] = finders


def pytest_load_initial_conftests(early_config, parser, args) -> None:
    _first_finder()


def pytest_collection(session) -> None:
    _first_finder()


def pytest_runtest_call(item):
    """A test whose callback failed an assertion fails, even when the tested code swallowed that failure."""
    if PEER is not None:
        PEER.escaped.clear()
    result = yield
    if PEER is not None and PEER.escaped:
        first = PEER.escaped[0]
        PEER.escaped.clear()
        raise AssertionError(f"a callback of this test failed inside the tested code ({type(first).__name__}: "
                             f"{first}) and the tested code went on")
    return result


_HOOK = {"wrapper": False, "hookwrapper": False, "optionalhook": False, "tryfirst": True, "trylast": False,
         "specname": None}
pytest_load_initial_conftests.pytest_impl = _HOOK  # pluggy's marks, set without importing pluggy
pytest_collection.pytest_impl = _HOOK
pytest_runtest_call.pytest_impl = {**_HOOK, "wrapper": True}


def _serve(fd: int, runner: str) -> None:
    """U: install the verdict guard for the files the agent changed (when the runner directory names them), then
    serve T until it closes the boundary; U's warnings are re-issued in T."""
    watched = os.path.join(runner, "watched.json")
    if os.path.exists(watched):
        spec = importlib.util.spec_from_file_location("harnessrl_verdict_guard", os.path.join(runner, "guard.py"))
        guard = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(guard)
        with open(watched, encoding="utf-8") as handle:
            guard.install(json.load(handle), os.getcwd(), runner)
        del guard, spec
    sock = socket.socket(fileno=fd)
    peer = wire.Peer(sock, guarded=False)
    sys.path.insert(0, os.getcwd())

    shown = warnings.showwarning

    def forward(message, category, filename, lineno, file=None, line=None):
        if peer.busy or threading.current_thread() is not threading.main_thread():  # never mid-message, never racing
            return shown(message, category, filename, lineno, file, line)
        peer.request("warn", args=(str(message), category, str(filename), int(lineno or 0)))

    warnings.simplefilter("always")
    warnings.showwarning = forward
    peer.serve_forever()


if __name__ == "__main__":
    _serve(int(sys.argv[1]), sys.argv[2])
