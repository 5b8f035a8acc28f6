"""Run a project's pytest tests in the hardened sandbox (`sandbox`: an unprivileged uid of its own, no network,
nothing of the host but the interpreter, the checkout and the grader's runner files), isolated from what the tested
code could plant, and read back each test's outcome with the evidence that it can be believed.

- The repository's own modules run in a process of their own (`process_boundary`, `boundary=True`, the default):
  pytest, the tests, the plugin and the outcomes pipe are in the test process, which the tested code reaches only by
  answering the tests' calls through proxies; the layers below are what stands in pytest's process without it.
- The interpreter runs isolated (`python -I -B`: no PYTHON* variables, no script directory or cwd on sys.path, no
  bytecode written). The grader's launcher imports pytest and the outcomes plugin (copied from this package into a
  directory of the grader's, bound read-only) BEFORE it puts the repository on sys.path: a `pytest.py`, `_pytest/` or
  `pytest_outcomes.py` in the repository cannot replace them.
- Configuration is the grader's: `-c` names the repository's root configuration file chosen here (or an empty one of
  the grader's), `--rootdir` and `--confcutdir` are the repository (no `.pytest.ini` or conftest above it is read),
  third-party plugins are not auto-loaded, the cache provider is off.
- Outcomes come back through a pipe (an inherited file descriptor), not a file the tested code could rewrite from an
  `atexit` hook; the plugin writes one document and closes it. pytest's exit status must agree with the outcomes.
- With explicit test ids the grader's sentinel tests run too (`outcome_check`): blanket report forgery shows.
- With explicit test ids the run is VERDICT_ROUNDS canary rounds side by side (`canaries`), each on a copy of the
  checkout of its own in a sandbox of its own (its own uid, runner directory, sentinel and pipe): every graded test
  function is real in some rounds and, with a failing line appended, a canary in the others, under the same node id.
  Code under test that turns a targeted test green (its report, its assertions, its function, the whole outcomes
  document and exit status) turns its indistinguishable canary green too, which is the run's `problem` (tamper);
  a test's outcome is taken from its real rounds. `rounds=1` is one plain run (the generator's trusted code needs no
  canaries, but gets them by default).
- The checkout stays the grader's (root-owned: the sandbox user cannot change it); the task store, the project and
  the grader's modules are not in the sandbox at all. Output goes to a file of the grader's (tail kept).
"""

from __future__ import annotations

import configparser
import json
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import tomllib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from recipes.swe.canaries import (
    Role,
    RoundPlan,
    TestSite,
    canary_problem,
    plan_rounds,
    real_outcomes,
    rewrite_source,
    role_of,
    unguarded,
)
from recipes.swe.outcome_check import (
    SENTINEL_PREFIX,
    SENTINEL_SOURCE,
    disagreement,
    parse_document,
    rewritten,
    split_sentinel,
)
from recipes.swe.process_boundary import UNAVAILABLE_EXIT
from recipes.swe.verdict_guard import TAMPER_EXIT
from sandbox import Limits, Network, SandboxError, SandboxSpec, build_argv, ensure_available, kill
from sandbox.paths import interpreter_paths
from sandbox.rlimits import within_current_limits

PLUGIN_SOURCE = Path(__file__).with_name("pytest_outcomes.py")  # copied next to the launcher for each run
PLUGIN_MODULE = "harnessrl_pytest_outcomes"  # the name the launcher registers the plugin under
GUARD_SOURCE = Path(__file__).with_name("verdict_guard.py")  # the audit hook, copied next to the plugin
GUARD_MODULE = "harnessrl_verdict_guard"
BOUNDARY_SOURCE = Path(__file__).with_name("process_boundary.py")  # the tested code's own process, copied likewise
BOUNDARY_WIRE_SOURCE = Path(__file__).with_name("boundary_wire.py")  # copied beside it, under the same name
BOUNDARY_MODULE = "harnessrl_process_boundary"
BOUNDARY_FILES = ("boundary.py", BOUNDARY_WIRE_SOURCE.name)  # in a runner directory: the boundary is kept
WANTED_FILE = "wanted.json"  # in a runner directory: the node ids the outcomes plugin selects
# Run by `python -I -B -c`: argv = [-c, plugin path, outcomes fd, wanted ids file ("" for all), pytest args...].
# With `boundary.py` in the runner directory the repository's modules run in a process of their own
# (`process_boundary`, which then installs the verdict guard there); without it the guard is installed here.
LAUNCHER = (
    "import importlib.util, json, os, sys\n"
    "import pytest\n"  # resolved from the interpreter's site-packages before the repository is on sys.path
    "runner = os.path.dirname(os.path.abspath(sys.argv[1]))\n"
    "def load(name, file):\n"
    "    spec = importlib.util.spec_from_file_location(name, os.path.join(runner, file))\n"
    "    module = importlib.util.module_from_spec(spec)\n"
    "    spec.loader.exec_module(module)\n"
    "    return module\n"
    f"plugin = load({PLUGIN_MODULE!r}, 'plugin.py')\n"
    "plugin.OUTPUT_FD = int(sys.argv[2])\n"
    "plugin.WANTED = frozenset(json.load(open(sys.argv[3]))) if sys.argv[3] else None\n"
    "plugins, boundary = [plugin], None\n"
    "if os.path.exists(os.path.join(runner, 'boundary.py')):\n"
    f"    boundary = load({BOUNDARY_MODULE!r}, 'boundary.py')\n"
    "    boundary.start(runner)\n"
    "    plugins.append(boundary)\n"
    "elif os.path.exists(os.path.join(runner, 'watched.json')):\n"  # the verdict guard, for the changed files
    f"    load({GUARD_MODULE!r}, 'guard.py').install(json.load(open(os.path.join(runner, 'watched.json'))), "
    "os.getcwd(), runner)\n"
    "sys.path.insert(0, os.getcwd())\n"  # what `python -m pytest` does, now that the runner is loaded
    "try:\n"
    "    status = int(pytest.main(sys.argv[4:] + (boundary.PYTEST_ARGS if boundary else []), plugins=plugins))\n"
    "except BaseException:\n"  # an exit pytest let through (the tested code's SystemExit at a conftest's import)
    "    status = 3\n"
    "sys.exit(boundary.finish(status) if boundary is not None else status)\n"
)
# The repository's own pytest configuration, in pytest's order of precedence: file name -> section that must exist.
CONFIG_FILES = (("pytest.ini", None), (".pytest.ini", None), ("pyproject.toml", "tool.pytest.ini_options"),
                ("tox.ini", "pytest"), ("setup.cfg", "tool:pytest"))
OUTPUT_TAIL_LINES = 20
OUTPUT_TAIL_BYTES = 64 << 10  # read back from the end of the output file
MAX_DOCUMENT_BYTES = 64 << 20  # the most of the outcomes pipe kept (a larger stream is not the plugin's document)
# The grading sandbox's limits: a test run needs no more, and its output file is capped by the file-size limit.
GRADING_LIMITS = Limits(processes=128, memory_bytes=8 << 30, cpu_s=1800, file_bytes=64 << 20, tmp_bytes=512 << 20)
# Each run gets a uid of its own from this range (the process limit counts per uid, host-wide: a fork bomb in one run
# must not starve another), apart from the harnesses' (controller.runners.harness_sandbox: 100_000 + slot).
GRADER_UIDS = range(200_000, 265_536)
# Canary rounds of a run with named tests (`canaries`): 2 = each graded test function real in one round, a canary in
# the other; the rounds run side by side (2 CPUs: about the wall time of one run).
VERDICT_ROUNDS = 2
LAUNCHER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # prlimit/bwrap's own environment


@dataclass(frozen=True)
class TestRun:
    """Outcomes of one pytest run."""

    __test__ = False  # not a pytest test class

    outcomes: dict[str, str]  # node id -> passed | failed | skipped (absent: not collected)
    messages: dict[str, str] = field(default_factory=dict)  # node id -> failure message (failed tests only)
    output_tail: str = ""  # the last lines of pytest's output, for diagnosis
    returncode: int = 0  # pytest's exit status
    problem: str | None = None  # why the outcomes cannot be believed (exit status, stream or sentinel disagree)
    timed_out: bool = False  # the run was killed at its time limit
    # The problem is evidence of rewritten outcomes (a canary or the sentinel's failing test not reported failed, the
    # verdict guard, a forged verdict line), not only a run that could not be read (a crash, a stray writer, a status).
    forged: bool = False
    xfailed: frozenset[str] = frozenset()  # node ids that failed as their xfail mark expected (reported skipped)

    def with_outcome(self, outcome: str) -> set[str]:
        """Node ids that ended with `outcome`."""
        return {node for node, seen in self.outcomes.items() if seen == outcome}


def config_file(repo: Path) -> Path | None:
    """The repository's root pytest configuration file, chosen as pytest would (None when there is none)."""
    for name, section in CONFIG_FILES:
        path = repo / name
        if not path.is_file() or path.is_symlink():
            continue
        if section is None or _has_section(path, section):
            return path
    return None


def _has_section(path: Path, section: str) -> bool:
    try:
        if path.suffix == ".toml":
            table = tomllib.loads(path.read_text(encoding="utf-8"))
            return isinstance(table.get("tool", {}).get("pytest", {}).get("ini_options"), dict)
        parser = configparser.ConfigParser(interpolation=None)
        parser.read_string(path.read_text(encoding="utf-8"))
        return parser.has_section(section)
    except (ValueError, configparser.Error, UnicodeDecodeError):
        return False


def files_of_tests(test_ids: list[str]) -> list[str]:
    """The files of `test_ids` (in order, once each): pytest collects them, the plugin selects the ids."""
    return list(dict.fromkeys(test_id.split("::", 1)[0] for test_id in test_ids))


def pytest_args(repo: Path, runner: Path, test_ids: list[str] | None, sentinel: Path | None) -> list[str]:
    """pytest's arguments: the grader's configuration choices, then the tests' files (and the sentinel)."""
    config = config_file(repo) or runner / "pytest.ini"
    return ["-c", str(config), f"--rootdir={repo}", f"--confcutdir={repo}", "-p", "no:cacheprovider",
            "--continue-on-collection-errors", "-q", "--color=no", *files_of_tests(test_ids or []),
            *([str(sentinel)] if sentinel is not None else [])]


def prepare_runner(runner: Path, test_ids: list[str] | None, watched: Sequence[str] = (),
                   boundary: bool = True) -> Path | None:
    """The grader's directory of a run: the plugin, an empty ini, the verdict guard and the files it watches (the
    ones the agent's diff changed, when any), the process boundary (`boundary`; False runs the repository's modules
    in the test process), the wanted ids and the sentinel (returned) when tests are named."""
    runner.mkdir(parents=True)
    shutil.copyfile(PLUGIN_SOURCE, runner / "plugin.py")
    (runner / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    if boundary:
        for source, name in zip((BOUNDARY_SOURCE, BOUNDARY_WIRE_SOURCE), BOUNDARY_FILES, strict=True):
            shutil.copyfile(source, runner / name)
    if watched:
        shutil.copyfile(GUARD_SOURCE, runner / "guard.py")
        (runner / "watched.json").write_text(json.dumps(list(watched)), encoding="utf-8")
    if test_ids is None:
        return None
    (runner / WANTED_FILE).write_text(json.dumps(test_ids), encoding="utf-8")
    sentinel = runner / f"{SENTINEL_PREFIX}{secrets.token_hex(4)}.py"
    sentinel.write_text(SENTINEL_SOURCE, encoding="utf-8")
    return sentinel


def grading_spec(repo: Path, runner: Path, allow_network: bool = False) -> SandboxSpec:
    """The sandbox of a test run: `repo` as the cwd (root-owned: not writable to the run's own unprivileged uid), the
    interpreter and `runner` read-only, nothing else."""
    # Not root (a Kubernetes pod): bwrap can only run as the caller's own uid, which then owns the checkout too.
    uid = GRADER_UIDS[secrets.randbelow(len(GRADER_UIDS))] if os.geteuid() == 0 else os.geteuid()
    return SandboxSpec(writable=repo.resolve(), readonly=(*interpreter_paths(), runner.resolve()), uid=uid, gid=uid,
                       network=Network.HOST if allow_network else Network.NONE,
                       limits=within_current_limits(GRADING_LIMITS),
                       env={"HOME": "/tmp", "LANG": "C.UTF-8", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})


def run_tests(repo: Path, test_ids: list[str] | None = None, *, timeout_s: float = 300.0,
              allow_network: bool = False, rounds: int = VERDICT_ROUNDS, watched: Sequence[str] = (),
              boundary: bool = True) -> TestRun:
    """Run `test_ids` (all tests when None) in `repo`, sandboxed: with named tests, in `rounds` canary rounds
    (`canaries`; side by side as root, else one after the other; 1: one plain run, no canaries); `watched`: the
    repository files the agent's diff changed, which the verdict guard watches (`verdict_guard`); `boundary`: the
    repository's modules run in a process of their own (`process_boundary`; False: in pytest's, as before it).
    Raises SandboxError when no sandbox can be built."""
    ensure_available()
    if test_ids is None or rounds == 1:
        return _run_once(repo, test_ids, timeout_s, allow_network, watched, boundary)
    plans = plan_rounds(test_ids, rounds, random.SystemRandom())
    with tempfile.TemporaryDirectory(prefix="harnessrl-rounds-") as scratch:
        copies = [Path(scratch) / secrets.token_hex(6) / repo.name for _ in plans]
        placed = [write_round(repo, copy, plan) for copy, plan in zip(copies, plans, strict=True)]
        # Side by side only as root (each round its own uid and /proc); unprivileged, the rounds share the caller's
        # uid and the host's /proc view, so they run one after the other and cannot meet.
        with ThreadPoolExecutor(max_workers=len(plans) if os.geteuid() == 0 else 1) as pool:
            runs = list(pool.map(lambda copy: _run_once(copy, test_ids, timeout_s, allow_network, watched, boundary),
                                 copies))
    roles = [{test_id: role_of(plan, test_id, unguarded(plan, sites)) for test_id in test_ids}
             for plan, sites in zip(plans, placed, strict=True)]
    return merge_rounds(roles, runs)


def write_round(repo: Path, destination: Path, plan: RoundPlan) -> frozenset[TestSite]:
    """A copy of `repo` at `destination` (created) with the plan's lines placed in its test files; the sites placed
    (a test file that is missing, a link, outside the copy or not UTF-8 Python keeps its text)."""
    shutil.copytree(repo, destination, symlinks=True)
    root, placed = destination.resolve(), set()
    for file in sorted({site.file for site in plan.roles}):
        path = destination / file
        if path.is_symlink() or not path.is_file() or not path.resolve().is_relative_to(root):
            continue
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            continue
        checks = {site.scope: line for site, line in plan.lines.items() if site.file == file}
        rewritten, scopes = rewrite_source(text, checks)
        path.write_bytes(rewritten.encode("utf-8"))
        placed |= {TestSite(file, scope) for scope in scopes}
    return frozenset(placed)


def merge_rounds(roles: list[dict[str, Role]], runs: list[TestRun]) -> TestRun:
    """One run from its canary rounds: a round that cannot be believed, or a canary not reported failed, is the
    problem; outcomes and messages of the graded tests come from their real rounds."""
    timed_out = any(run.timed_out for run in runs)
    bad = next((index for index, run in enumerate(runs) if run.problem is not None), None)
    shown = runs[bad if bad is not None else 0]
    problem = None if timed_out else \
        f"round {bad + 1} of {len(runs)}: {shown.problem}" if bad is not None else \
        canary_problem(roles, [run.outcomes for run in runs], [run.xfailed for run in runs])
    forged = problem is not None and (shown.forged if bad is not None else True)  # a canary is evidence
    outcomes = real_outcomes(roles, [run.outcomes for run in runs])
    messages = {node: text for node, text in runs[0].messages.items() if node not in roles[0]}
    for test_id in roles[0]:
        found = [runs[i].messages[test_id] for i, r in enumerate(roles) if r[test_id] == "real" and
                 test_id in runs[i].messages]
        if outcomes.get(test_id) == "failed" and found:
            messages[test_id] = found[0]
    return TestRun(outcomes=outcomes, messages=messages, output_tail=shown.output_tail, returncode=shown.returncode,
                   problem=problem, timed_out=timed_out, forged=forged)


def _run_once(repo: Path, test_ids: list[str] | None, timeout_s: float, allow_network: bool,
              watched: Sequence[str] = (), boundary: bool = True) -> TestRun:
    """One pytest run of `test_ids` in `repo` in a sandbox of its own (a fresh uid, runner directory and sentinel)."""
    with tempfile.TemporaryDirectory(prefix="harnessrl-pytest-") as scratch:
        runner = Path(scratch) / "runner"
        sentinel = prepare_runner(runner, test_ids, watched, boundary)
        wanted = str(runner / WANTED_FILE) if test_ids is not None else ""
        read_fd, write_fd = os.pipe()
        argv = [sys.executable, "-I", "-B", "-c", LAUNCHER, str(runner / "plugin.py"), str(write_fd), wanted,
                *pytest_args(repo.resolve(), runner, test_ids, sentinel)]
        command = build_argv(grading_spec(repo, runner, allow_network), argv, caller_uid=os.geteuid())
        output, returncode, timed_out, raw = _spawn(command, Path(scratch) / "output", read_fd, write_fd, timeout_s)
    tail = "\n".join(output.splitlines()[-OUTPUT_TAIL_LINES:])
    if boundary and returncode == UNAVAILABLE_EXIT:
        raise SandboxError(f"the test run could not keep the tested code in a process of its own: {tail[-400:]}")
    document = parse_document(raw)
    own, _ = split_sentinel(document.outcomes)
    guarded = bool(watched) and returncode == TAMPER_EXIT
    problem = guard_problem(returncode, tail) if guarded else \
        None if timed_out else disagreement(document, returncode, sentinel=sentinel is not None)
    return TestRun(outcomes=own, messages=document.messages, output_tail=tail, returncode=returncode,
                   problem=problem, timed_out=timed_out, xfailed=document.xfailed,
                   forged=problem is not None and (guarded or rewritten(document)))


def guard_problem(returncode: int, tail: str) -> str:
    """The verdict guard's finding (`verdict_guard`: its line in the output), as the run's problem."""
    found = [line for line in tail.splitlines() if line.startswith("harnessrl verdict guard:")]
    what = found[-1].removeprefix("harnessrl verdict guard:").strip() if found else f"exit status {returncode}"
    return (f"the verdict guard stopped the tested code ({what}): code the agent changed reached for what could "
            "rewrite a verdict in-process")


def _spawn(command: list[str], output_path: Path, read_fd: int, write_fd: int,
           timeout_s: float) -> tuple[str, int, bool, bytes]:
    """Run the sandbox `command` with `write_fd` inherited and its output in `output_path`; (output tail,
    returncode, timed out, what the pipe got)."""
    chunks: list[bytes] = []
    reader = threading.Thread(target=_drain, args=(read_fd, chunks), daemon=True)
    with output_path.open("wb") as sink:
        try:
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                       env={"PATH": LAUNCHER_PATH}, start_new_session=True, pass_fds=(write_fd,))
        except OSError as error:
            os.close(read_fd)
            raise SandboxError(f"cannot start the grading sandbox {command[0]!r}: {error}") from error
        finally:
            os.close(write_fd)
    reader.start()
    timed_out = False
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill(process)
        process.wait()
        timed_out = True
    reader.join(timeout=5.0)
    return _tail(output_path), (-9 if timed_out else process.returncode), timed_out, b"".join(chunks)


def _tail(path: Path) -> str:
    """The last OUTPUT_TAIL_BYTES of a file, decoded."""
    with path.open("rb") as handle:
        handle.seek(max(0, path.stat().st_size - OUTPUT_TAIL_BYTES))
        return handle.read().decode("utf-8", errors="replace")


def _drain(read_fd: int, chunks: list[bytes]) -> None:
    """Read the outcomes pipe to its end (every writer closed it), keeping at most MAX_DOCUMENT_BYTES (past that, a
    NUL byte that no JSON document parses), then close it."""
    kept = 0
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        while chunk := pipe.read(1 << 20):
            if kept + len(chunk) > MAX_DOCUMENT_BYTES:
                if kept <= MAX_DOCUMENT_BYTES:
                    chunks.append(b"\0")
                kept = MAX_DOCUMENT_BYTES + 1
                continue
            chunks.append(chunk)
            kept += len(chunk)
