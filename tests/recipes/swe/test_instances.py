"""The normalised instance schema and `reverse_patch`: bug then reverse restores the tree, exact reversed headers."""

from __future__ import annotations

import re
import subprocess
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from recipes.swe.diffs import apply_patch, copy_tree, tree_diff, tree_files
from recipes.swe.generator import base_path
from recipes.swe.instances import (
    INSTANCE_KEYS,
    InstanceError,
    normalize_instance,
    reverse_patch,
)


def snapshot(root: Path) -> dict[str, bytes]:
    return {name: (root / name).read_bytes() for name in sorted(tree_files(root))}


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_bug_then_its_reverse_restores_each_generated_base(tiny_store, tmp_path):
    store, instances = tiny_store
    for number, instance in enumerate(instances):
        work = tmp_path / f"work{number}"
        copy_tree(base_path(store, instance), work)
        pristine = snapshot(work)
        apply_patch(work, instance["patch"])
        assert snapshot(work) != pristine
        fix = normalize_instance(instance, "swe-smith")["fix_patch"]
        assert fix == reverse_patch(instance["patch"]) and fix != instance["patch"]
        apply_patch(work, fix)
        assert snapshot(work) == pristine
        assert reverse_patch(fix) == instance["patch"]


LINES = [f"line {i}\n" for i in range(40)]
BEFORE = {"pkg/many.py": "".join(LINES), "pkg/gone.py": "def gone():\n    return 1\n",
          "pkg/tail.txt": "no newline at the end", "pkg/keep.py": "x = 1\n"}
AFTER = {"pkg/many.py": "".join(["LINE 0\n", *LINES[1:20], "inserted\n", *LINES[20:38], "changed 38\n", LINES[39]]),
         "pkg/new.py": "def new():\n    return 2\n", "pkg/tail.txt": "no newline at the end\nnow one more line",
         "pkg/keep.py": "x = 1\n", "docs/added.md": "no final newline"}


def git_diff(root: Path, before: dict[str, str], after: dict[str, str]) -> str:
    """The diff `git diff` writes (index lines, new/deleted file modes) from tree `before` to tree `after`."""
    def git(*args: str) -> str:
        env = {"PATH": "/usr/bin:/bin:/usr/local/bin", "GIT_CEILING_DIRECTORIES": str(root.parent),
               "HOME": str(root), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
               "GIT_COMMITTER_EMAIL": "t@t"}
        return subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True).stdout

    write_tree(root, before)
    git("init", "--quiet")
    git("add", "--all")
    git("commit", "--quiet", "--message", "before")
    for name in set(before) - set(after):
        (root / name).unlink()
    write_tree(root, after)
    git("add", "--all")
    return git("diff", "--cached", "--no-color", "--no-renames")


def test_git_diffs_with_added_deleted_files_and_many_hunks_reverse(tmp_path):
    patch = git_diff(tmp_path / "repo", BEFORE, AFTER)
    assert "new file mode 100644" in patch and "deleted file mode 100644" in patch and patch.count("\n@@ ") >= 5
    assert "\\ No newline at end of file" in patch and "\nindex " in patch
    before = write_tree(tmp_path / "before", BEFORE)
    work = tmp_path / "work"
    copy_tree(before, work)
    apply_patch(work, patch)
    assert snapshot(work) == snapshot(write_tree(tmp_path / "after", AFTER))
    reverse = reverse_patch(patch)
    assert reverse != patch
    apply_patch(work, reverse)
    assert snapshot(work) == snapshot(before)
    assert reverse_patch(reverse) == patch
    assert "deleted file mode 100644" in reverse.split("diff --git a/pkg/new.py")[1].split("diff --git")[0]


def test_tree_diffs_of_changed_files_with_many_hunks_and_no_final_newline_reverse(tmp_path):
    changed = [name for name in BEFORE if name in AFTER]
    before = write_tree(tmp_path / "before", {name: BEFORE[name] for name in changed})
    after = write_tree(tmp_path / "after", {name: AFTER[name] for name in changed})
    patch = tree_diff(before, after)
    assert patch.count("\n@@ ") >= 3 and "\\ No newline at end of file" in patch
    work = tmp_path / "work"
    copy_tree(after, work)
    apply_patch(work, reverse_patch(patch))
    assert snapshot(work) == snapshot(before)
    assert reverse_patch(reverse_patch(patch)) == patch


def test_the_reverse_of_a_one_sided_change_applies_where_git_reverse_does(tmp_path):
    before = write_tree(tmp_path / "before", {"a.py": "one\ntwo\nthree\n"})
    after = write_tree(tmp_path / "after", {"a.py": "one\n2\nthree\nfour\n"})
    patch = tree_diff(before, after)
    by_git, by_us = tmp_path / "git", tmp_path / "us"
    copy_tree(after, by_git)
    copy_tree(after, by_us)
    apply_patch(by_git, patch, reverse=True)
    apply_patch(by_us, reverse_patch(patch))
    assert snapshot(by_us) == snapshot(by_git) == snapshot(before)


GIT_PATCH = """\
diff --git a/src/app.py b/src/app.py
index 1111111..2222222 100644
--- a/src/app.py
+++ b/src/app.py
@@ -1,4 +1,4 @@ def main():
 a
-b
-c
+B
+C
 d
@@ -10 +10,2 @@ tail
-x
+y
+z
\\ No newline at end of file
diff --git a/src/new.py b/src/new.py
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/src/new.py
@@ -0,0 +1,2 @@
+print(1)
+print(2)
diff --git a/run.sh b/bin/run.sh
old mode 100644
new mode 100755
similarity index 100%
rename from run.sh
rename to bin/run.sh
"""
GIT_REVERSE = """\
diff --git a/src/app.py b/src/app.py
index 2222222..1111111 100644
--- a/src/app.py
+++ b/src/app.py
@@ -1,4 +1,4 @@ def main():
 a
-B
-C
+b
+c
 d
@@ -10,2 +10 @@ tail
-y
-z
\\ No newline at end of file
+x
diff --git a/src/new.py b/src/new.py
deleted file mode 100644
index 3333333..0000000
--- a/src/new.py
+++ /dev/null
@@ -1,2 +0,0 @@
-print(1)
-print(2)
diff --git a/bin/run.sh b/run.sh
old mode 100755
new mode 100644
similarity index 100%
rename from bin/run.sh
rename to run.sh
"""


def test_a_git_patch_reverses_paths_modes_renames_hashes_ranges_and_lines_exactly():
    assert reverse_patch(GIT_PATCH) == GIT_REVERSE
    assert reverse_patch(GIT_REVERSE) == GIT_PATCH


def test_a_new_file_patch_with_git_headers_applies_and_its_reverse_deletes_the_file(tmp_path):
    patch = "".join(chunk for chunk in GIT_PATCH.split("diff --git ")[1:] if chunk.startswith("a/src/new.py"))
    patch = "diff --git " + patch
    apply_patch(tmp_path, patch)
    assert (tmp_path / "src" / "new.py").read_text() == "print(1)\nprint(2)\n"
    apply_patch(tmp_path, reverse_patch(patch))
    assert not (tmp_path / "src" / "new.py").exists()


def test_paths_holding_the_b_separator_keep_their_sides():
    patch = "diff --git a/x b/y.py b/x b/y.py\n--- a/x b/y.py\n+++ b/x b/y.py\n@@ -1 +1 @@\n-1\n+2\n"
    assert reverse_patch(patch) == "diff --git a/x b/y.py b/x b/y.py\n--- a/x b/y.py\n+++ b/x b/y.py\n" \
        "@@ -1 +1 @@\n-2\n+1\n"


@pytest.mark.parametrize(("patch", "words"), [
    ("diff --git a/i.png b/i.png\nBinary files a/i.png and b/i.png differ\n", "binary"),
    ("diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1,3 +1,3 @@\n a\n-b\n", "ends inside a hunk"),
    ("diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1,2 +1,2 @@\n a\n*b\n", "expected ' ', '-', '+'"),
])
def test_patches_that_cannot_be_reversed_say_why(patch, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        reverse_patch(patch)


SMITH_ROW = {"instance_id": "o__r.1234.func_pm__ab", "repo": "swesmith/o__r.1234",
             "patch": "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-return a\n+return b\n",
             "FAIL_TO_PASS": ["t.py::test_a"], "PASS_TO_PASS": ["t.py::test_b", "t.py::test_c"],
             "created_at": "2025-03-14T22:49:27.906744", "image_name": "swesmith.x86_64.o__r.1234",
             "base_commit": "o__r.1234.func_pm__ab", "problem_statement": "a returns b"}
VERIFIED_ROW = {"repo": "astropy/astropy", "instance_id": "astropy__astropy-12907", "base_commit": "d16bfe05",
                "patch": "diff --git a/f.py b/f.py\n--- a/f.py\n+++ b/f.py\n@@ -1 +1 @@\n-bad\n+good\n",
                "test_patch": "diff --git a/t.py b/t.py\n--- a/t.py\n+++ b/t.py\n@@ -1 +1 @@\n-x\n+y\n",
                "problem_statement": "separability is wrong", "hints_text": "", "created_at": "2022-03-03T15:14:54Z",
                "version": "4.3", "FAIL_TO_PASS": '["t.py::test_new"]', "PASS_TO_PASS": "[]",
                "environment_setup_commit": "298ccb47", "difficulty": "15 min - 1 hour"}


def test_swe_smith_rows_normalise_with_the_bug_and_its_reverse():
    assert normalize_instance(SMITH_ROW, "swe-smith") == {
        "instance_id": "o__r.1234.func_pm__ab", "source": "swe-smith", "repo": "swesmith/o__r.1234",
        "base_commit": "o__r.1234.func_pm__ab", "problem_statement": "a returns b",
        "FAIL_TO_PASS": ["t.py::test_a"], "PASS_TO_PASS": ["t.py::test_b", "t.py::test_c"],
        "image_name": "swesmith.x86_64.o__r.1234", "bug_patch": SMITH_ROW["patch"],
        "fix_patch": "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-return b\n+return a\n",
        "test_patch": None, "created_at": "2025-03-14T22:49:27.906744", "version": None,
        "environment_setup_commit": None, "level": None}


def test_swe_bench_rows_normalise_with_json_test_lists_and_the_gold_fix():
    instance = normalize_instance(VERIFIED_ROW, "swe-bench-verified")
    assert tuple(instance) == INSTANCE_KEYS
    assert instance == {
        "instance_id": "astropy__astropy-12907", "source": "swe-bench-verified", "repo": "astropy/astropy",
        "base_commit": "d16bfe05", "problem_statement": "separability is wrong", "FAIL_TO_PASS": ["t.py::test_new"],
        "PASS_TO_PASS": [], "image_name": None, "bug_patch": None, "fix_patch": VERIFIED_ROW["patch"],
        "test_patch": VERIFIED_ROW["test_patch"], "created_at": "2022-03-03T15:14:54Z", "version": "4.3",
        "environment_setup_commit": "298ccb47", "level": None}


@pytest.mark.parametrize(("value", "text"), [
    (datetime(2022, 3, 3, 15, 14, 54), "2022-03-03T15:14:54Z"),
    (datetime(2022, 3, 3, 17, 14, 54, tzinfo=timezone(timedelta(hours=2))), "2022-03-03T15:14:54Z"),
    (datetime(2022, 3, 3, 15, 14, 54, 5, tzinfo=UTC), "2022-03-03T15:14:54.000005Z"),
])
def test_timestamps_become_utc_iso_text(value, text):
    assert normalize_instance({**VERIFIED_ROW, "created_at": value}, "swe-bench-verified")["created_at"] == text


@pytest.mark.parametrize(("field", "value", "words"), [
    ("FAIL_TO_PASS", "[not json", "FAIL_TO_PASS is not valid JSON"),
    ("FAIL_TO_PASS", 3, "FAIL_TO_PASS must be a list of test ids"),
    ("PASS_TO_PASS", '{"a": 1}', "PASS_TO_PASS must be a list of test ids"),
    ("PASS_TO_PASS", None, "PASS_TO_PASS must be a list of test ids"),
    ("FAIL_TO_PASS", [1, 2], "FAIL_TO_PASS must be a list of test ids"),
    ("problem_statement", ["x"], "problem_statement must be text"),
])
def test_malformed_fields_name_the_instance_and_the_field(field, value, words):
    with pytest.raises(InstanceError, match=f"'astropy__astropy-12907': {words}"):
        normalize_instance({**VERIFIED_ROW, field: value}, "swe-bench-verified")


@pytest.mark.parametrize("instance_id", [None, "", "  "])
def test_rows_without_an_instance_id_are_refused(instance_id):
    with pytest.raises(InstanceError, match="has no instance_id"):
        normalize_instance({**SMITH_ROW, "instance_id": instance_id}, "swe-smith")


def test_missing_optional_text_becomes_none_and_a_missing_statement_empty():
    row = {key: SMITH_ROW[key] for key in ("instance_id", "patch", "FAIL_TO_PASS", "PASS_TO_PASS")}
    instance = normalize_instance(row, "swe-smith")
    assert instance["problem_statement"] == "" and instance["repo"] == ""
    assert instance["image_name"] is None and instance["created_at"] is None and instance["base_commit"] is None


def test_unknown_sources_are_refused():
    with pytest.raises(InstanceError, match="unknown source 'swe-bench'"):
        normalize_instance(SMITH_ROW, "swe-bench")  # type: ignore[arg-type]
