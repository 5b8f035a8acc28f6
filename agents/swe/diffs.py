"""Unified diffs between directory trees (git-apply compatible), applying them, and copying trees without VCS data."""

from __future__ import annotations

import difflib
import fnmatch
import os
import shutil
import subprocess
from pathlib import Path

# Never part of a diff: VCS data, caches, build metadata.
IGNORED_PARTS = (".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis")
IGNORED_SUFFIXES = (".pyc", ".pyo")
NO_NEWLINE = "\\ No newline at end of file\n"


def _ignored(relative: Path) -> bool:
    return any(part in IGNORED_PARTS or part.endswith(".egg-info") for part in relative.parts) or \
        relative.suffix in IGNORED_SUFFIXES


def tree_files(root: Path) -> set[str]:
    """Relative POSIX paths of the files under `root`, ignored paths left out."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*")
            if p.is_file() and not p.is_symlink() and not _ignored(p.relative_to(root))}


def copy_tree(source: Path, destination: Path) -> None:
    """Copy `source` to `destination` (which must not exist) without .git and caches."""
    shutil.copytree(source, destination, symlinks=True,
                    ignore=shutil.ignore_patterns(*IGNORED_PARTS, "*.pyc"))


def _lines(path: Path | None) -> list[str] | None:
    if path is None or not path.exists():
        return []
    try:
        return path.read_text(encoding="utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def file_diff(relative: str, before: Path | None, after: Path | None) -> str:
    """The git-style diff of one file ('' when equal; binary files yield a one-line note git apply rejects)."""
    old, new = _lines(before), _lines(after)
    if old is None or new is None:
        return f"diff --git a/{relative} b/{relative}\nBinary files a/{relative} and b/{relative} differ\n" \
            if old != new else ""
    old_name = f"a/{relative}" if before is not None and before.exists() else "/dev/null"
    new_name = f"b/{relative}" if after is not None and after.exists() else "/dev/null"
    body = []
    for line in difflib.unified_diff(old, new, old_name, new_name, n=3):
        body.append(line if line.endswith("\n") else line + "\n" + NO_NEWLINE)
    if not body:
        return ""
    return f"diff --git a/{relative} b/{relative}\n" + _mode_line(old_name, new_name, before, after) + "".join(body)


def _mode_line(old_name: str, new_name: str, before: Path | None, after: Path | None) -> str:
    """`new file mode` / `deleted file mode`: without it `git apply` rejects a diff that adds or removes a file."""
    if old_name == "/dev/null" and after is not None:
        return f"new file mode {_git_mode(after)}\n"
    if new_name == "/dev/null" and before is not None:
        return f"deleted file mode {_git_mode(before)}\n"
    return ""


def _git_mode(path: Path) -> str:
    """Git's file mode of a regular file: 100755 when executable, else 100644."""
    return "100755" if path.stat().st_mode & 0o111 else "100644"


def tree_diff(before: Path, after: Path) -> str:
    """The unified diff that turns tree `before` into tree `after`."""
    names = sorted(tree_files(before) | tree_files(after))
    return "".join(file_diff(name, before / name, after / name) for name in names)


def split_patch(patch: str) -> dict[str, str]:
    """A multi-file patch split per file path."""
    files: dict[str, str] = {}
    for chunk in patch.split("diff --git a/")[1:]:
        path = chunk.split(" b/", 1)[0]
        files[path] = "diff --git a/" + chunk
    return files


def matches_any(path: str, patterns: tuple[str, ...]) -> bool:
    """Whether a relative path (or its file name) matches one of the glob patterns."""
    return any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(Path(path).name, p) for p in patterns)


def apply_patch(repo: Path, patch: str, *, reverse: bool = False) -> None:
    """Apply `patch` in `repo` with `git apply` (works outside a git repository); raises with git's message."""
    if not patch.strip():
        return
    argv = ["git", "apply", "--whitespace=nowarn", *(["--reverse"] if reverse else []), "-"]
    # The ceiling stops git from treating an enclosing repository as the root the patch paths are relative to.
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(repo.resolve().parent)}
    result = subprocess.run(argv, cwd=repo, input=patch, text=True, capture_output=True, env=env)
    if result.returncode != 0:
        raise ValueError(f"patch does not apply in {repo}: {result.stderr.strip()}")
