"""tree_diff writes diffs that `git apply` accepts, added and deleted files included."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from recipes.swe.diffs import apply_patch, tree_diff

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git to check the diff")


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_added_changed_and_deleted_files_apply_with_git_and_with_apply_patch(tmp_path):
    before = tree(tmp_path / "before", {"keep.py": "a = 1\n", "gone.py": "x = 1\n", "pkg/mod.py": "b = 2\n"})
    after = tree(tmp_path / "after", {"keep.py": "a = 3\n", "new.py": "y = 2\n", "pkg/mod.py": "b = 2\n"})
    (after / "run.sh").write_text("echo hi\n")
    (after / "run.sh").chmod(0o755)
    patch = tree_diff(before, after)
    assert "new file mode 100644" in patch and "new file mode 100755" in patch
    assert "deleted file mode 100644" in patch and "pkg/mod.py" not in patch
    for target in (tmp_path / "git", tmp_path / "ours"):
        shutil.copytree(before, target)
    (tmp_path / "patch.diff").write_text(patch)
    subprocess.run(["git", "apply", "--check", str(tmp_path / "patch.diff")], cwd=tmp_path / "git", check=True)
    subprocess.run(["git", "apply", str(tmp_path / "patch.diff")], cwd=tmp_path / "git", check=True)
    apply_patch(tmp_path / "ours", patch)
    for root in (tmp_path / "git", tmp_path / "ours"):
        assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) == \
            ["keep.py", "new.py", "pkg/mod.py", "run.sh"]
        assert (root / "keep.py").read_text() == "a = 3\n" and (root / "new.py").read_text() == "y = 2\n"
