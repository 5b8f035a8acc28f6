"""The process boundary attacked from the tested code's side (issue 27, point 2): code appended to the module under
test, run in its own process (U) by the real sandboxed runner, reaching for the test process (T) by the ways a process
of the same uid has: its memory, file descriptors and environment through /proc, ptrace, signals; and objects built
to make a test's comparison true. None of them turns a failing graded test green; honest library code still passes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from recipes.swe.diffs import apply_patch
from recipes.swe.grader import checkout
from recipes.swe.testrun import run_tests
from tests.recipes.swe.conftest import appended_checkout

# Each way into T is tried at import, and what happened is what `total` returns: a test's failure message shows it.
REACH_FOR_THE_RUNNER = '''
import ctypes as _ctypes, os as _os
_parent = _os.getppid()
def _ptrace():
    libc = _ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(16, _parent, 0, 0) != 0:  # PTRACE_ATTACH
        raise OSError(_ctypes.get_errno(), "ptrace")
_TRIES = {"mem": lambda: open(f"/proc/{_parent}/mem", "r+b").close(),
          "fd": lambda: _os.listdir(f"/proc/{_parent}/fd"),
          "environ": lambda: open(f"/proc/{_parent}/environ", "rb").read(),
          "ptrace": _ptrace}
_SEEN = []
for _name, _try in _TRIES.items():
    try:
        _try()
        _SEEN.append(_name + ":reached")
    except OSError as _error:
        _SEEN.append(_name + ":refused")
def total(items):
    return " ".join(_SEEN)
'''
# Results that compare equal to anything: in pytest's own process `clamp(12, 0, 10) == 10` holds with the bug in.
EQUAL_TO_ANYTHING = '''
class _Anything:
    def __eq__(self, other):
        return True
    __hash__ = object.__hash__
def _anything(function):
    def forged(*args, **kwargs):
        return _Anything()
    return forged
clamp, total = _anything(clamp), _anything(total)
'''
KILL_THE_RUNNER = '''
import os as _os, signal as _signal
_os.kill(_os.getppid(), _signal.SIGKILL)
'''
HONEST_LIBRARY = '''
import collections, dataclasses, logging, warnings
Pair = collections.namedtuple("Pair", "low high")
@dataclasses.dataclass
class Range:
    low: int
    high: int
class OutOfRange(ValueError):
    pass
def checked(value, low, high):
    if not low <= value <= high:
        raise OutOfRange(f"{value} is outside [{low}, {high}]")
    return value
def read_fixture(path):
    with open(path) as handle:
        return handle.read()
def each(items, callback):
    return [callback(item) for item in items]
def noted(value):
    logging.getLogger("tinymath").warning("value %s", value)
    warnings.warn("noted is deprecated", DeprecationWarning)
    return value
'''
HONEST_TESTS = '''

def test_library_features():
    import os
    import pytest
    import tinymath
    from tinymath import OutOfRange, Pair, Range, checked, each, noted, read_fixture
    assert Pair(1, 2).high == 2 and Range(1, 2) == Range(1, 2) and Range(1, 2).low == 1
    assert read_fixture(os.path.join("tests", "data.txt")) == "fixture"
    assert each([1, 2], lambda item: item * 10) == [10, 20]
    with pytest.raises(OutOfRange, match="outside"):
        checked(5, 0, 1)
    with pytest.raises(ValueError):
        checked(-1, 0, 1)
    with pytest.warns(DeprecationWarning, match="deprecated"):
        assert noted(3) == 3
    tinymath.LIMIT = 7
    assert tinymath.LIMIT == 7
'''


def _graded(store: Path, instance: dict, workdir: Path, appended: str, fixed: bool = False) -> Path:
    return appended_checkout(store, instance, workdir, appended, fixed)[0]


def _tests(instance: dict) -> list[str]:
    return instance["FAIL_TO_PASS"] + instance["PASS_TO_PASS"]


def test_the_runner_is_out_of_reach_through_proc_and_ptrace(tiny_store, tmp_path):
    store, instances = tiny_store
    instance = instances[0]
    repo = _graded(store, instance, tmp_path, REACH_FOR_THE_RUNNER)
    run = run_tests(repo, _tests(instance), timeout_s=120, rounds=1)
    message = run.messages.get("tests/test_tinymath.py::test_total", "")
    assert "mem:refused" in message and "fd:refused" in message and "environ:refused" in message, message
    assert "ptrace:refused" in message and ":reached" not in message, message


def test_objects_equal_to_anything_forge_a_pass_only_in_pytests_process(tiny_store, tmp_path):
    store, instances = tiny_store
    instance = next(i for i in instances if not any("is_even" in test for test in i["FAIL_TO_PASS"]))
    repo = _graded(store, instance, tmp_path, EQUAL_TO_ANYTHING)
    inside = run_tests(repo, _tests(instance), timeout_s=120, boundary=False)  # the canary rounds included
    assert inside.problem is None and {inside.outcomes.get(t) for t in instance["FAIL_TO_PASS"]} == {"passed"}
    across = run_tests(repo, _tests(instance), timeout_s=120)
    assert {across.outcomes.get(t) for t in instance["FAIL_TO_PASS"]} == {"failed"}, across.output_tail


def test_killing_the_runner_is_no_verdict(tiny_store, tmp_path):
    store, instances = tiny_store
    instance = instances[0]
    run = run_tests(_graded(store, instance, tmp_path, KILL_THE_RUNNER, fixed=True), _tests(instance), timeout_s=120,
                    rounds=1)
    assert run.problem is not None and "passed" not in set(run.outcomes.values()), (run.problem, run.outcomes)


def test_across_the_boundary_the_verdict_guard_watches_the_tested_codes_process(tiny_store, tmp_path):
    """A profiler set by the changed file ends U, and the run names the guard (its exit status passed on by T)."""
    store, instances = tiny_store
    instance = next(i for i in instances if "tinymath.py" in i["patch"])
    code = "\nimport sys as _sys\ngetattr(_sys, 'set' + 'profile')(lambda *args: None)\n"
    repo = _graded(store, instance, tmp_path, code, fixed=True)
    run = run_tests(repo, _tests(instance), timeout_s=120, rounds=1, watched=["tinymath.py"])
    assert run.problem is not None and "verdict guard" in run.problem, (run.problem, run.output_tail)


@pytest.mark.parametrize("rounds", [1, 2])
def test_honest_library_code_passes_across_the_boundary(tiny_store, tmp_path, rounds):
    """Library classes, exceptions raised and caught by class, a test's callback, a fixture file read by the library,
    a warning caught by pytest.warns and a module attribute set by the test all work through the boundary."""
    store, instances = tiny_store
    instance = next(i for i in instances if "tinymath.py" in i["patch"])
    repo = _graded(store, instance, tmp_path, HONEST_LIBRARY, fixed=True)
    with (repo / "tests" / "test_tinymath.py").open("a") as handle:
        handle.write(HONEST_TESTS)
    (repo / "tests" / "data.txt").write_text("fixture")
    tests = [*_tests(instance), "tests/test_tinymath.py::test_library_features"]
    run = run_tests(repo, tests, timeout_s=120, rounds=rounds, watched=["tinymath.py"])
    assert run.problem is None and run.with_outcome("passed") == set(tests), (run.problem, run.output_tail)


# Tests inside the package (`pkgmath/tests/`): the tested code, imported first through the package's __init__, points
# its package's __path__ at a folder of its own holding a `tests` package that would empty every
# test's run if the test process loaded it from there (and then finds the real test modules: with `__path__` taken from
# the tested code's process, as the first version of the boundary did, every graded test passed with the bug in).
PACKAGE_INIT = "from pkgmath.core import clamp, is_even, total\n"
PLANT_TESTS = '''
import os as _os
import tempfile as _tempfile
_planted = _tempfile.mkdtemp()  # a folder the tested code's process may write
_os.makedirs(_planted + "/tests", exist_ok=True)
with open(_planted + "/tests/__init__.py", "w") as _handle:
    _handle.write("import os, _py" + "test.python as _p\\n__path__[:] = [os.path.join(os.getcwd(), 'pkgmath', "
                  "'tests')]\\n_p.Function.runtest = lambda self: None\\n")
import pkgmath as _package
_package.__path__.insert(0, _planted)
'''


@pytest.fixture(scope="module")
def package_store(tmp_path_factory) -> tuple[Path, dict]:
    """A task generated from the tiny project laid out as a package with its tests inside it."""
    from recipes.swe.generator import generate
    from tests.recipes.swe.conftest import TINY_SOURCE, TINY_TESTS

    root = tmp_path_factory.mktemp("pkgsrc") / "pkgmath"
    (root / "pkgmath" / "tests").mkdir(parents=True)
    (root / "pkgmath" / "__init__.py").write_text(PACKAGE_INIT)
    (root / "pkgmath" / "core.py").write_text(TINY_SOURCE)
    (root / "pkgmath" / "tests" / "__init__.py").write_text("")
    (root / "pkgmath" / "tests" / "test_core.py").write_text(TINY_TESTS.replace("from tinymath", "from pkgmath.core"))
    store = tmp_path_factory.mktemp("pkgstore")
    return store, generate(str(root), store, count=1, seed=0)[0]


def test_tests_inside_the_package_are_loaded_from_the_checkout_only(package_store, tmp_path):
    store, instance = package_store
    repo = checkout(store, instance, tmp_path / "attack")
    with (repo / "pkgmath" / "core.py").open("a") as handle:
        handle.write(PLANT_TESTS)
    run = run_tests(repo, _tests(instance), timeout_s=120, rounds=1)
    assert {run.outcomes.get(test) for test in instance["FAIL_TO_PASS"]} == {"failed"}, run.output_tail
    fixed = checkout(store, instance, tmp_path / "fixed")
    apply_patch(fixed, instance["patch"], reverse=True)
    run = run_tests(fixed, _tests(instance), timeout_s=120)
    assert run.problem is None and run.with_outcome("passed") == set(_tests(instance)), run.output_tail


# Code that empties every test's run if the test process ever runs it (names built from pieces, as a forger would).
EMPTY_EVERY_TEST = '''
import sys as _sys
_python = vars(_sys)["mod" + "ules"].get("_py" + "test.python")
if _python is not None:
    _python.Function.runtest = lambda self: None
'''
# Layouts where the repository's code is found by other means than a top-level module: each file below is the
# tested code (not protected by the patch policy), so it must run in its own process. (file -> its import name)
IMPORTLIB_MODE = {"pytest.ini": "[pytest]\naddopts = --import-mode=importlib\n", "pkgm/tests/__init__.py": ""}
LAYOUTS = {  # layout -> (other files, the tested module's file, its import name, the test file)
    "namespace package": ({}, "ns/pkgm/core.py", "ns.pkgm.core", "tests/test_x.py"),
    "pytest.ini pythonpath": ({"pytest.ini": "[pytest]\npythonpath = lib\n"}, "lib/tinymath.py", "tinymath",
                              "tests/test_x.py"),
    "a module named testing": ({"pkgm/__init__.py": ""}, "pkgm/testing.py", "pkgm.testing", "tests/test_x.py"),
    "src layout": ({"pytest.ini": "[pytest]\npythonpath = src\n", "src/pkgm/__init__.py": ""}, "src/pkgm/core.py",
                   "pkgm.core", "tests/test_x.py"),
    # pytest loads a test package's parents itself in importlib mode (spec_from_file_location, past every finder)
    "importlib mode, tests in the package": (IMPORTLIB_MODE, "pkgm/__init__.py", "pkgm", "pkgm/tests/test_x.py"),
}
NAMES = ("clamp_inside", "clamp_low", "clamp_high", "total", "is_even")


def _layout(root: Path, layout: str, source: str) -> tuple[Path, list[str]]:
    from tests.recipes.swe.conftest import TINY_TESTS

    extra, module_file, module, test_file = LAYOUTS[layout]
    for relative, text in {**extra, module_file: source,
                           test_file: TINY_TESTS.replace("from tinymath", f"from {module}")}.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root, [f"{test_file}::test_{name}" for name in NAMES]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_of_the_tested_code_runs_in_its_own_process(tmp_path, layout):
    """The bug in `is_even` and code that would empty every test's run in pytest's process: the graded test still
    fails (the code never ran where pytest is); the same layout with the honest module passes every test."""
    from tests.recipes.swe.conftest import TINY_SOURCE

    buggy = TINY_SOURCE.replace("number % 2 == 0", "number % 2 == 1") + EMPTY_EVERY_TEST
    repo, graded = _layout(tmp_path / "attack", layout, buggy)
    run = run_tests(repo, graded, timeout_s=120, rounds=1)
    assert run.outcomes.get(graded[-1]) == "failed", run.output_tail
    repo, graded = _layout(tmp_path / "honest", layout, TINY_SOURCE)
    honest = run_tests(repo, graded, timeout_s=120, rounds=1)
    assert honest.problem is None and honest.with_outcome("passed") == set(graded), honest.output_tail


# The checkout belonging to the test's own user (the grading pod's case: the round's copy is the pod user's): the
# tested code changes the test files' mode and rewrites them, and plants a conftest, before pytest collects them.
REWRITE_THE_TESTS = '''
import glob as _glob, os as _os
_SEEN = []
for _path in _glob.glob("tests/*.py"):
    try:
        _os.chmod(_path, 0o666)
        with open(_path, "a") as _handle:
            _handle.write("\\n")
        _SEEN.append("rewrote")
    except OSError:
        _SEEN.append("refused")
try:
    open("tests/conftest.py", "w").close()
    _SEEN.append("planted")
except OSError:
    _SEEN.append("refused")
def total(items):
    return " ".join(_SEEN)
'''


def test_the_tested_code_cannot_write_a_checkout_its_user_owns(tiny_store, tmp_path):
    """The launcher run directly (no sandbox; as this suite's user, who owns the copy): Landlock keeps U's writes to
    its own folders, so the test files stay as the grader packed them."""
    import os

    from recipes.swe.grading_job_pod import run_launcher_directly
    from recipes.swe.outcome_check import parse_document
    from recipes.swe.process_boundary import landlock_abi
    from recipes.swe.testrun import prepare_runner, pytest_args

    if landlock_abi() == 0:
        pytest.skip("this kernel offers no Landlock: the boundary refuses such a checkout (tested below)")
    store, instances = tiny_store
    instance = instances[0]
    repo = _graded(store, instance, tmp_path, REWRITE_THE_TESTS)
    assert os.stat(repo / "tests" / "test_tinymath.py").st_uid == os.getuid()
    runner, scratch = tmp_path / "runner", tmp_path / "scratch"
    scratch.mkdir()
    sentinel = prepare_runner(runner, _tests(instance))
    _, _, _, raw = run_launcher_directly(repo, runner, scratch, pytest_args(repo, runner, _tests(instance), sentinel),
                                         120.0)
    message = parse_document(raw).messages.get("tests/test_tinymath.py::test_total", "")
    assert "refused" in message and "rewrote" not in message and "planted" not in message, message
    assert not (repo / "tests" / "conftest.py").exists()


def test_without_landlock_a_checkout_its_user_owns_is_not_graded(tiny_store, tmp_path):
    """The same run on a kernel without Landlock (the launcher's copy told it has none): the test process refuses to
    start the tested code, names why, and exits with the boundary's own status (the grader's infrastructure)."""
    from recipes.swe.grading_job_pod import run_launcher_directly
    from recipes.swe.process_boundary import UNAVAILABLE_EXIT
    from recipes.swe.testrun import prepare_runner, pytest_args

    store, instances = tiny_store
    instance = instances[0]
    repo = _graded(store, instance, tmp_path, REWRITE_THE_TESTS)
    runner, scratch = tmp_path / "runner", tmp_path / "scratch"
    scratch.mkdir()
    sentinel = prepare_runner(runner, _tests(instance))
    source = (runner / "boundary.py").read_text()
    assert "abi, here = landlock_abi(), os.getcwd()" in source
    (runner / "boundary.py").write_text(source.replace("abi, here = landlock_abi(), os.getcwd()",
                                                       "abi, here = 0, os.getcwd()"))
    tail, status, _, raw = run_launcher_directly(repo, runner, scratch, pytest_args(repo, runner, _tests(instance),
                                                                                    sentinel), 120.0)
    assert status == UNAVAILABLE_EXIT and raw == b"" and "offers no Landlock" in tail, (status, tail)


def test_the_tested_code_cannot_pass_for_the_graders_infrastructure(tiny_store, tmp_path):
    """Review: the tested code exiting with the boundary's own status (87, "not graded: infra") while a conftest
    imports it: the run is the agent's failing one, not infra (only the test process's start may exit so)."""
    store, instances = tiny_store
    instance = instances[0]
    repo = _graded(store, instance, tmp_path, "\nraise SystemExit(87)\n", fixed=True)
    (repo / "tests" / "conftest.py").write_text("import tinymath  # noqa: F401\n")
    run = run_tests(repo, _tests(instance), timeout_s=120, rounds=1)  # no SandboxError
    assert run.returncode != 87 and "passed" not in set(run.outcomes.values()), (run.returncode, run.output_tail)
