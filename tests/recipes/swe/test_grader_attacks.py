"""Every way an agent forged `resolved=True` without fixing the bug, and the obvious next ones, each ending in reward 0
(and `tamper` where the attempt tampered). Two layers: the grader as a whole (the patch policy refuses the change),
and the test runner alone with the planted files applied anyway (isolation, the outcomes pipe, the exit status and the
sentinel still tell the truth)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from recipes.swe import diffs
from recipes.swe import grader as grader_module
from recipes.swe.diffs import apply_patch, split_patch, tree_diff, tree_files
from recipes.swe.generator import base_path
from recipes.swe.grader import checkout, grade_patch, grade_workdir
from recipes.swe.patch_policy import review_patch
from recipes.swe.testrun import run_tests

# A plugin that turns every report green: what a `.pytest.ini` / setup.cfg / pyproject / tox.ini injection loads.
ALL_PASS_PLUGIN = "def pytest_runtest_logreport(report):\n    report.outcome = 'passed'\n"
# The module under test rewrites the results on its way out.
ATEXIT_FORGERY = '''
import atexit, json, os
_dups = [os.dup(fd) for fd in range(3, 64) if _is_open(fd)] if (_is_open := lambda fd: os.path.exists(
    f"/proc/self/fd/{fd}")) else []
def _forge():
    forged = json.dumps({"outcomes": {}, "messages": {}, "exitstatus": 0}).encode()
    for fd in _dups:
        try:
            os.write(fd, forged)
        except OSError:
            pass
    os._exit(0)
atexit.register(_forge)
'''
# The module under test patches pytest in-process so that every report says "passed".
REPORT_FORGERY = '''
import _pytest.reports as _reports
_original = _reports.TestReport.from_item_and_call.__func__
def _green(cls, item, call):
    report = _original(cls, item, call)
    report.outcome = "passed"
    return report
_reports.TestReport.from_item_and_call = classmethod(_green)
'''


def _agent_repo(store: Path, instance: dict, workdir: Path) -> Path:
    return checkout(store, instance, workdir / "repo")


def _write(repo: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)


@pytest.mark.parametrize("files", [
    {"pytest.py": "import sys\nsys.exit(0)\n"},
    {"pytest_outcomes.py": "def pytest_sessionfinish(session, exitstatus):\n    pass\n"},
    {".pytest.ini": "[pytest]\naddopts = -p allpass\n", "allpass.py": ALL_PASS_PLUGIN},
    {"setup.cfg": "[tool:pytest]\naddopts = -p allpass\n", "allpass.py": ALL_PASS_PLUGIN},
    {"pyproject.toml": "[tool.pytest.ini_options]\naddopts = '-p allpass'\n", "allpass.py": ALL_PASS_PLUGIN},
    {"tox.ini": "[pytest]\naddopts = -p allpass\n", "allpass.py": ALL_PASS_PLUGIN},
    {"sub/conftest.py": ALL_PASS_PLUGIN},
    {"tests/helpers.py": "X = 1\n"},
    {"tests/__init__.py": ""},
    {"tests/data/expected.json": "{}\n"},
    {"sitecustomize.py": "import os\n"},
    {"evil.pth": "import os\n"},
    {"recipes/swe/pytest_outcomes.py": "OUTPUT_FD = None\n"},  # a copy of the grader's plugin, edited
])
def test_planted_runner_files_are_tampering_even_with_the_real_fix(tiny_store, tmp_path, files):
    store, instances = tiny_store
    instance = instances[0]
    repo = _agent_repo(store, instance, tmp_path)
    apply_patch(repo, instance["patch"], reverse=True)
    _write(repo, files)
    grade = grade_workdir(store, instance, repo)
    assert grade.reward == 0.0 and grade.details["tamper"] is True, grade.details
    assert {r.split(":")[0] for r in grade.details["tamper_reasons"]} & set(files)


def test_a_symlink_to_the_pristine_source_is_tampering(tiny_store, tmp_path):
    store, instances = tiny_store
    instance = instances[0]
    repo = _agent_repo(store, instance, tmp_path)
    changed = next(iter(split_patch(instance["patch"])))
    (repo / changed).unlink()
    (repo / changed).symlink_to(base_path(store, instance) / changed)  # the fixed file, straight from the store
    grade = grade_workdir(store, instance, repo)
    assert grade.reward == 0.0 and grade.details["tamper"] is True
    assert grade.details["tamper_reasons"] == [f"{changed}: a symlink or submodule"]
    (repo / "store").symlink_to(store)  # and a new link leaving the tree
    grade = grade_workdir(store, instance, repo)
    assert sorted(grade.details["tamper_reasons"]) == ["store: a symlink or submodule",
                                                       f"{changed}: a symlink or submodule"]


def test_a_changed_binary_or_oversized_file_is_tampering(tiny_store, tmp_path, monkeypatch):
    store, instances = tiny_store
    instance = instances[0]
    monkeypatch.setattr(diffs, "MAX_TEXT_FILE_BYTES", 100)
    base, repo = checkout(store, instance, tmp_path / "base"), _agent_repo(store, instance, tmp_path)
    (base / "tests" / "blob.bin").write_bytes(b"\xff\x00" * 10)
    (repo / "tests" / "blob.bin").write_bytes(b"\xff\x01" * 10)
    with (repo / "tinymath.py").open("a") as handle:  # an oversized source file, changed
        handle.write("# " + "x" * 200 + "\n")
    review = review_patch(tree_diff(base, repo), frozenset(tree_files(base)))
    assert sorted(v.reason for v in review.violations) == ["a binary diff", "under a test folder (tests, their "
                                                           "helpers, __init__.py and data files)"]
    (repo / "tests" / "blob.bin").write_bytes(b"\xff\x00" * 10)
    assert "blob.bin" not in tree_diff(base, repo)  # unchanged binary: no section


@pytest.mark.parametrize("patch", [
    "diff --git a/tinymath.py b/tinymath.py\nBinary files a/tinymath.py and b/tinymath.py differ\n",
    "diff --git a/tinymath.py b/tinymath.py\nold mode 100644\nnew mode 120000\n",
    "diff --git a/fix b/fix\nnew file mode 120000\n--- /dev/null\n+++ b/fix\n@@ -0,0 +1 @@\n+/\n",
])
def test_binary_and_symlink_diffs_are_tampering(tiny_store, patch):
    store, instances = tiny_store
    grade = grade_patch(store, instances[0], patch)
    assert grade.reward == 0.0 and grade.details["tamper"] is True


def _edit_source(store: Path, instance: dict, repo: Path, appended: str) -> None:
    """Append code to the buggy module (an allowed edit: the policy lets it through)."""
    changed = next(iter(split_patch(instance["patch"])))
    with (repo / changed).open("a") as handle:
        handle.write(appended)


@pytest.mark.slow
def test_reading_the_fix_from_the_store_or_git_objects_finds_nothing(tiny_store, tmp_path):
    store, instances = tiny_store
    instance = instances[0]
    repo = _agent_repo(store, instance, tmp_path)
    pristine = base_path(store, instance) / "tinymath.py"
    assert not (repo / ".git").exists()
    # The module replaces itself with the pristine (fixed) base from the store, or from git objects in the checkout.
    _edit_source(store, instance, repo, f'''
import subprocess as _subprocess
try:
    exec(open({str(pristine)!r}).read())
except OSError:
    try:
        exec(_subprocess.run(["git", "show", "HEAD:tinymath.py"], capture_output=True, text=True, check=True).stdout)
    except Exception:
        pass
''')
    # The control: where the store is visible (unsandboxed), the planted code does turn the failing tests green.
    control = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                              *instance["FAIL_TO_PASS"]], cwd=repo, capture_output=True, text=True)
    assert control.returncode == 0, control.stdout[-2000:]
    grade = grade_workdir(store, instance, repo)
    assert grade.reward == 0.0 and grade.details["tamper"] is True  # `exec(`: refused by the policy
    run = run_tests(repo, instance["FAIL_TO_PASS"], timeout_s=120)  # the policy bypassed: the runner finds nothing
    assert run.problem is None and {run.outcomes.get(test) for test in instance["FAIL_TO_PASS"]} == {"failed"}


@pytest.mark.parametrize("appended", [ATEXIT_FORGERY, REPORT_FORGERY])
def test_tested_code_that_rewrites_results_is_caught_by_the_policy_and_by_the_runner(tiny_store, tmp_path, appended):
    store, instances = tiny_store
    instance = instances[0]
    repo = _agent_repo(store, instance, tmp_path)
    _edit_source(store, instance, repo, appended)
    grade = grade_workdir(store, instance, repo)
    assert grade.reward == 0.0 and grade.details["tamper"] is True, grade.details
    assert "added code uses" in grade.details["tamper_reasons"][0]
    tests = instance["FAIL_TO_PASS"] + instance["PASS_TO_PASS"]  # the policy bypassed: the runner alone
    run = run_tests(repo, tests, timeout_s=120)  # across the process boundary the forgery reaches nothing
    assert "passed" not in {run.outcomes.get(test) for test in instance["FAIL_TO_PASS"]}, run.outcomes
    run = run_tests(repo, tests, timeout_s=120, boundary=False)  # in pytest's process the runner sees it
    assert run.problem is not None, run.outcomes


@pytest.mark.parametrize(("files", "forged_by_runner"), [
    ({"pytest.py": "import sys\nsys.exit(0)\n"}, False),
    ({"pytest_outcomes.py": ALL_PASS_PLUGIN}, False),
    ({"harnessrl_pytest_outcomes.py": ALL_PASS_PLUGIN}, False),
    ({".pytest.ini": "[pytest]\naddopts = -p allpass\n", "allpass.py": ALL_PASS_PLUGIN}, True),
    ({"sitecustomize.py": "import sys\nsys.exit(0)\n"}, False),
])
def test_the_runner_alone_is_not_fooled_by_planted_files(tiny_store, tmp_path, files, forged_by_runner):
    """Without the policy (files applied anyway): shadowing modules are never imported; a configuration that loads an
    all-pass plugin from the checkout is refused: across the process boundary the plugin is the tested code's and
    never loads in pytest's process (pytest stops), and in pytest's process it turns the sentinel green."""
    store, instances = tiny_store
    instance = instances[0]
    repo = _agent_repo(store, instance, tmp_path)
    _write(repo, files)
    run = run_tests(repo, instance["FAIL_TO_PASS"], timeout_s=120)
    if forged_by_runner:
        assert run.problem is not None and "Error while loading plugin" in run.output_tail, run.problem
        assert not run.outcomes, run.outcomes
        inside = run_tests(repo, instance["FAIL_TO_PASS"], timeout_s=120, boundary=False)
        assert inside.problem is not None and "sentinel" in inside.problem, inside.problem
    else:
        assert run.problem is None, run.output_tail
        assert all(run.outcomes.get(test) == "failed" for test in instance["FAIL_TO_PASS"]), run.outcomes


def test_the_tests_run_as_another_user_without_the_store_or_the_grader_and_cannot_write_the_checkout(tiny_store,
                                                                                                        tmp_path):
    store, instances = tiny_store
    instance = instances[0]
    repo = _agent_repo(store, instance, tmp_path)
    grader_source = Path(grader_module.__file__)
    _write(repo, {"tests/test_peek.py": f"""import os, pytest

def test_peek():
    assert os.getuid() in range(200_000, 265_536)
    assert not os.path.exists({str(store)!r}) and not os.path.exists({str(grader_source)!r})
    with pytest.raises(PermissionError):
        open("tests/test_tinymath.py", "a")
    with pytest.raises(OSError):
        open("planted.py", "w")
"""})
    run = run_tests(repo, ["tests/test_peek.py::test_peek"], timeout_s=120)
    assert run.outcomes == {"tests/test_peek.py::test_peek": "passed"}, run.output_tail
    assert run.problem is None and os.listdir(store)  # the store is there, only not to the tests


@pytest.mark.slow
def test_a_run_past_its_time_limit_is_killed_and_not_tampering(tiny_store, tmp_path):
    store, instances = tiny_store
    instance = instances[0]
    repo = _agent_repo(store, instance, tmp_path)
    _edit_source(store, instance, repo, "\nimport time as _time\n_time.sleep(60)\n")
    grade = grade_patch(store, instance, tree_diff(checkout(store, instance, tmp_path / "base"), repo), timeout_s=1)
    assert grade.reward == 0.0 and grade.details["timed_out"] is True and grade.details["tamper"] is False


@pytest.mark.parametrize(("appended", "tampered"), [
    # a fork bomb at import: the process limit stops it, the sandbox's end takes the sleepers with it
    ("\nimport os as _os, time as _time\nwhile True:\n    if _os.fork() == 0:\n        _time.sleep(60)\n"
     "        _os._exit(0)\n", False),
    # 1 GiB of output: the file-size limit stops the writer; the grader reads back only a tail
    ("\nimport os as _os\nfor _ in range(1024):\n    _os.write(1, b'x' * (1 << 20))\n", True),
    # kill -9 -1: across the process boundary it reaches the test process (the same uid in the run's own PID
    # namespace), which ends with no outcomes document: tamper; the grader, outside, survives to assert
    ("\nimport os as _os, signal as _signal\n_os.kill(-1, _signal.SIGKILL)\n", True),
])
@pytest.mark.slow
def test_a_fork_bomb_a_flood_of_output_or_kill_all_ends_in_zero_quickly(tiny_store, tmp_path, appended, tampered):
    store, instances = tiny_store
    instance = instances[0]
    repo = _agent_repo(store, instance, tmp_path)
    _edit_source(store, instance, repo, appended)
    grade = grade_workdir(store, instance, repo)
    assert grade.reward == 0.0 and grade.details["tamper"] is tampered and "timed_out" not in grade.details
    assert len(grade.details["pytest_tail"]) < 100_000
