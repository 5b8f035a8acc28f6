"""Unified diffs between directory trees (git-apply compatible), applying them, and copying trees without VCS data."""

from __future__ import annotations

import difflib
import filecmp
import fnmatch
import os
import shutil
import subprocess
from pathlib import Path

# Never part of a diff: VCS data, caches, build metadata.
IGNORED_PARTS = (".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis")
IGNORED_SUFFIXES = (".pyc", ".pyo")
NO_NEWLINE = "\\ No newline at end of file\n"
MAX_TEXT_FILE_BYTES = 8 << 20  # a larger file is diffed as binary (never read whole into memory)


def _ignored(relative: Path) -> bool:
    return any(part in IGNORED_PARTS or part.endswith(".egg-info") for part in relative.parts) or \
        relative.suffix in IGNORED_SUFFIXES


def tree_files(root: Path) -> set[str]:
    """Relative POSIX paths of the files under `root`, ignored paths left out."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*")
            if p.is_file() and not p.is_symlink() and not _ignored(p.relative_to(root))}


def tree_links(root: Path) -> dict[str, str]:
    """Relative POSIX paths of the symlinks under `root` (never followed), with their targets."""
    return {p.relative_to(root).as_posix(): os.readlink(p) for p in root.rglob("*")
            if p.is_symlink() and not _ignored(p.relative_to(root))}


def copy_tree(source: Path, destination: Path) -> None:
    """Copy `source` to `destination` (which must not exist) without .git and caches."""
    shutil.copytree(source, destination, symlinks=True,
                    ignore=shutil.ignore_patterns(*IGNORED_PARTS, "*.pyc"))


def _lines(path: Path | None) -> list[str] | None:
    """The file's lines ([] when absent; None when binary or larger than MAX_TEXT_FILE_BYTES)."""
    if path is None or not path.exists():
        return []
    if path.stat().st_size > MAX_TEXT_FILE_BYTES:
        return None
    try:
        return path.read_text(encoding="utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def file_diff(relative: str, before: Path | None, after: Path | None) -> str:
    """The git-style diff of one file ('' when equal; binary and oversized files yield a one-line note that the patch
    policy and git apply reject)."""
    old, new = _lines(before), _lines(after)
    if old is None or new is None:
        # Both binary or oversized (so both exist): compared byte by byte, never read whole.
        same = old is None and new is None and filecmp.cmp(before, after, shallow=False)  # type: ignore[arg-type]
        note = f"diff --git a/{relative} b/{relative}\nBinary files a/{relative} and b/{relative} differ\n"
        return "" if same else note
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
    """The unified diff that turns tree `before` into tree `after`. A symlink is never followed: a path that is a
    symlink on either side (and differs) gets a section of mode 120000 naming its target, for the patch policy to
    refuse; empty new or deleted files get their header-only section, as git writes them."""
    links_before, links_after = tree_links(before), tree_links(after)
    files_before, files_after = tree_files(before), tree_files(after)
    sections = {}
    for name in sorted(files_before | files_after | set(links_before) | set(links_after)):
        if name in links_before or name in links_after:
            if links_before.get(name) != links_after.get(name) or (name in files_before) != (name in files_after):
                sections[name] = _link_section(name, links_after.get(name))
            continue
        old = before / name if name in files_before else None
        new = after / name if name in files_after else None
        sections[name] = file_diff(name, old, new) or _empty_file_section(name, old, new)
    return "".join(sections.values())


def _link_section(relative: str, target: str | None) -> str:
    """A symlink's section: created (its target as the content) or removed."""
    if target is None:
        return f"diff --git a/{relative} b/{relative}\ndeleted file mode 120000\n"
    return (f"diff --git a/{relative} b/{relative}\nnew file mode 120000\n--- /dev/null\n+++ b/{relative}\n"
            f"@@ -0,0 +1 @@\n+{target}\n{NO_NEWLINE}")


def _empty_file_section(relative: str, before: Path | None, after: Path | None) -> str:
    """The header-only section of an empty file created or deleted ('' when the file is on both sides)."""
    if before is None and after is not None:
        return f"diff --git a/{relative} b/{relative}\nnew file mode {_git_mode(after)}\n"
    if after is None and before is not None:
        return f"diff --git a/{relative} b/{relative}\ndeleted file mode {_git_mode(before)}\n"
    return ""


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


def main(argv: list[str]) -> int:
    """`python -I -B diffs.py BEFORE AFTER`: the diff of the two trees on stdout (how `agent_diff` runs it in a
    sandbox: this file imports nothing but the standard library)."""
    before, after = (Path(arg) for arg in argv)
    os.write(1, tree_diff(before, after).encode("utf-8", "surrogateescape"))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
