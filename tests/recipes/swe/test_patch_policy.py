"""The patch policy, table-tested: what of an agent's diff is graded, dropped, or refused as tampering."""

from __future__ import annotations

import pytest

from recipes.swe.patch_parse import parse_patch
from recipes.swe.patch_policy import PatchPolicy, protected_reason, review_patch

BASE = frozenset({"pkg/mod.py", "pkg/__init__.py", "tests/test_mod.py", "tests/helpers.py", "tests/__init__.py",
                  "tests/data/cases.json", "pkg/tests/util.py", "conftest.py", "setup.cfg", "pyproject.toml",
                  "tox.ini", "README.rst", "pkg/ext.c"})


def edit(path: str, old: str = "x", new: str = "y") -> str:
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-{old}\n+{new}\n"


def added(path: str, mode: str = "100644", text: str = "y") -> str:
    return f"diff --git a/{path} b/{path}\nnew file mode {mode}\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+{text}\n"


def reasons(patch: str, policy: PatchPolicy = PatchPolicy()) -> list[str]:
    return [v.reason for v in review_patch(patch, BASE, policy).violations]


def test_an_edit_of_an_existing_source_file_is_graded_unchanged():
    patch = edit("pkg/mod.py") + edit("pkg/ext.c")
    review = review_patch(patch, BASE)
    assert not review.tampered and review.graded == patch and review.graded_files == ("pkg/mod.py", "pkg/ext.c")


@pytest.mark.parametrize(("path", "reason"), [
    ("tests/test_mod.py", "under a test folder"),
    ("tests/helpers.py", "under a test folder"),
    ("tests/__init__.py", "under a test folder"),
    ("tests/data/cases.json", "under a test folder"),
    ("pkg/tests/util.py", "under a test folder"),
    ("Tests/util.py", "under a test folder"),
    ("pkg/test_inline.py", "a test file"),
    ("pkg/mod_test.py", "a test file"),
    ("conftest.py", "a test file or conftest.py"),
    ("pkg/sub/conftest.py", "a test file or conftest.py"),
    ("setup.cfg", "test-runner configuration"),
    ("pyproject.toml", "test-runner configuration"),
    ("tox.ini", "test-runner configuration"),
    ("pytest.ini", "test-runner configuration"),
    (".pytest.ini", "test-runner configuration"),
    ("sitecustomize.py", "start-up hook"),
    ("pkg/usercustomize.py", "start-up hook"),
    ("evil.pth", "start-up hook"),
    ("pytest.py", "shadows the test runner"),
    ("_pytest/runner.py", "shadows the test runner"),
    ("pluggy/__init__.py", "shadows the test runner"),
    ("pytest_outcomes.py", "shadows the test runner"),
    ("src/pytest.py", "shadows the test runner"),
])
def test_protected_paths_name_their_reason(path, reason):
    assert reason in (protected_reason(path) or "")


def test_protected_paths_are_tampering_whether_edited_or_added():
    for patch in (edit("tests/helpers.py"), added("tests/new_helper.py"), added(".pytest.ini"), added("pytest.py"),
                  added("sitecustomize.py"), added("pkg/conftest.py"), edit("setup.cfg")):
        review = review_patch(patch, BASE)
        assert review.tampered and review.graded == "", patch


def test_a_new_unprotected_file_is_dropped_or_tampering_as_the_policy_says():
    review = review_patch(edit("pkg/mod.py") + added("reproduce.py"), BASE)
    assert not review.tampered and review.dropped == ("reproduce.py",) and "reproduce" not in review.graded
    assert reasons(added("reproduce.py"), PatchPolicy(new_files="tamper")) == ["a new file"]


@pytest.mark.parametrize(("section", "reason"), [
    ("diff --git a/pkg/mod.py b/pkg/mod.py\ndeleted file mode 100644\n--- a/pkg/mod.py\n+++ /dev/null\n"
     "@@ -1 +0,0 @@\n-x\n", "a deleted file"),
    ("diff --git a/pkg/mod.py b/pkg/mod.py\nold mode 100644\nnew mode 100755\n", "a mode change"),
    ("diff --git a/pkg/mod.py b/pkg/mod.py\nBinary files a/pkg/mod.py and b/pkg/mod.py differ\n", "a binary diff"),
    ("diff --git a/pkg/mod.py b/pkg/mod.py\nindex 1..2\nGIT binary patch\nliteral 3\nKcmZ?wb^-tX\n", "a binary diff"),
    ("diff --git a/pkg/link b/pkg/link\nnew file mode 120000\n--- /dev/null\n+++ b/pkg/link\n@@ -0,0 +1 @@\n"
     "+/work/store\n\\ No newline at end of file\n", "a symlink or submodule"),
    ("diff --git a/pkg/mod.py b/pkg/mod.py\nold mode 100644\nnew mode 120000\n", "a symlink or submodule"),
    ("diff --git a/pkg/mod.py b/pkg/new.py\nsimilarity index 100%\nrename from pkg/mod.py\nrename to pkg/new.py\n",
     "a quoted, renamed or malformed"),
    (edit("README.rst"), "not a source file"),
    (edit("pkg/absent.py"), "not a file of the task's base"),
    (edit("../outside.py"), "a `.` or `..` component"),
    (edit(".git/config"), "version-control data"),
    ('diff --git "a/pkg/m\\tod.py" "b/pkg/m\\tod.py"\n', "a quoted, renamed or malformed"),
])
def test_changes_the_grader_will_not_apply_blind_are_tampering(section, reason):
    found = reasons(section)
    assert found and reason in found[0], found


@pytest.mark.parametrize(("patch", "reason"), [
    # a plain diff of a test file hidden after the hunk of an allowed edit: git apply would apply both
    (edit("pkg/mod.py") + "--- a/tests/test_mod.py\n+++ b/tests/test_mod.py\n@@ -1 +1 @@\n-a\n+b\n",
     "outside a hunk"),
    # the header names an allowed file, `+++` another
    ("diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/tests/test_mod.py\n@@ -1 +1 @@\n-x\n+y\n",
     "differ from the header's path"),
    # a hunk longer than its range swallows nothing: the extra line is refused
    ("diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1 @@\n-x\n+y\n+z\n",
     "outside a hunk"),
    ("diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1,3 +1,3 @@\n-x\n+y\n",
     "do not match"),
    ("preamble\n--- a/tests/test_mod.py\n+++ b/tests/test_mod.py\n@@ -1 +1 @@\n-a\n+b\n" + edit("pkg/mod.py"),
     "text before the first"),
    (edit("pkg/mod.py") + edit("pkg/mod.py", "y", "z"), "two sections"),
])
def test_a_diff_that_does_not_parse_strictly_is_tampering(patch, reason):
    found = reasons(patch)
    assert any(reason in r for r in found), found
    assert review_patch(patch, BASE).graded.count("tests/") == 0


def test_the_parser_counts_hunks_and_no_newline_markers():
    patch = ("diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1,2 +1,2 @@\n a\n-x\n+y\n"
             "@@ -9 +9 @@\n-p\n\\ No newline at end of file\n+q\n\\ No newline at end of file\n")
    parsed = parse_patch(patch)
    assert parsed.problems == () and parsed.changes[0].hunks == 2 and parsed.changes[0].text == patch


def test_extra_protected_patterns_of_a_task():
    assert reasons(edit("pkg/mod.py"), PatchPolicy(extra_protected=("pkg/mod.py",))) == ["protected by the task"]


@pytest.mark.parametrize(("line", "refused"), [
    ("import _pytest.reports", True),
    ("atexit.register(_forge)", True),
    ("os._exit(0)", True),
    ("sys.modules['harnessrl_pytest_outcomes'].OUTPUT_FD = 9", True),
    ("exec(open('/store/repos/x/mod.py').read())", True),
    ("value = eval ('1 + 1')", True),
    ("import ctypes", True),
    ("frame = sys._getframe(1)", True),
    ("for obj in gc.get_objects(): pass", True),
    ("data = open('/proc/self/environ').read()", True),
    ("os.dup2(devnull, 5)", True),
    ("value = ast.literal_eval(text)", False),
    ("PATTERN = re.compile(r'\\d+')", False),
    ("return low if value < low else value", False),
])
def test_added_python_code_that_could_rewrite_a_verdict_in_process_is_tampering(line, refused):
    found = reasons(edit("pkg/mod.py", "x", line))
    assert bool(found) is refused and (not found or "added code uses" in found[0]), found


def test_forbidden_code_is_screened_in_added_python_lines_only():
    removed = "diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1 @@\n-exec(x)\n+y\n"
    assert reasons(removed) == [] and reasons(edit("pkg/ext.c", "x", "exec(y);")) == []
    assert reasons(edit("pkg/mod.py", "return eval(a)", "return eval(b)")) == []  # an existing use, rewritten
    assert reasons(edit("pkg/mod.py", "x", "import pytest"), PatchPolicy(forbidden_code=())) == []
