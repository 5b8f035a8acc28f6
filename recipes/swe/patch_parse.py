"""A strict parser of git-style multi-file diffs: one `FileChange` per `diff --git` section, or the reason it cannot be
trusted. Pure; nothing is applied here.

Strict because `git apply` is lenient: a plain `--- / +++ / @@` diff hidden after a section's hunks, or a `+++` name
that differs from the header's, would be applied to a file no policy looked at. Every line must be accounted for:
headers git writes, hunk lines counted against their `@@` ranges, `\\ No newline at end of file` markers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HEADER = "diff --git "
HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
NO_NEWLINE_MARK = "\\"
SYMLINK_MODE = "120000"
GITLINK_MODE = "160000"
# Extended header lines git writes between `diff --git` and `---`: prefix -> FileChange flag it sets.
EXTENDED_HEADERS = {"index ": None, "old mode ": "mode_change", "new mode ": "mode_change",
                    "deleted file mode ": "deleted", "new file mode ": "new_file", "similarity index ": "renamed",
                    "dissimilarity index ": "renamed", "rename from ": "renamed", "rename to ": "renamed",
                    "copy from ": "renamed", "copy to ": "renamed", "Binary files ": "binary",
                    "GIT binary patch": "binary"}


@dataclass(frozen=True)
class FileChange:
    """One file's section of a diff."""

    path: str  # the path named by the section (relative, POSIX)
    text: str  # the section exactly as given (what `git apply` would get)
    new_file: bool = False  # `new file mode` or `--- /dev/null`
    deleted: bool = False  # `deleted file mode` or `+++ /dev/null`
    mode_change: bool = False  # `old mode` / `new mode`
    renamed: bool = False  # a rename or copy (similarity, rename/copy from/to)
    binary: bool = False  # a binary diff (`Binary files ... differ`, `GIT binary patch`)
    special_mode: bool = False  # a symlink (120000) or submodule (160000) on either side
    hunks: int = 0  # `@@` hunks


@dataclass(frozen=True)
class ParsedPatch:
    """A diff split into file changes, with the problems that make a section (or the whole diff) untrustworthy."""

    changes: tuple[FileChange, ...]  # the sections that parsed
    problems: tuple[tuple[str, str], ...]  # (path or "<patch>", why it cannot be trusted)


def header_path(line: str) -> str | None:
    """The path of `diff --git a/P b/P` (None when quoted, renamed or malformed)."""
    rest = line[len(HEADER):].rstrip("\n")
    if not rest.startswith("a/") or (len(rest) - 3) % 2:
        return None
    path = rest[2:2 + (len(rest) - 5) // 2]
    return path if rest == f"a/{path} b/{path}" and path else None


def parse_patch(patch: str) -> ParsedPatch:
    """Split `patch` into `FileChange`s; any line that is not part of a well-formed section is a problem."""
    lines = patch.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith(HEADER)]
    problems: list[tuple[str, str]] = []
    first = starts[0] if starts else len(lines)
    if any(line.strip() for line in lines[:first]):
        problems.append(("<patch>", "text before the first `diff --git` header (git apply may read it as a diff)"))
    changes = []
    for start, end in zip(starts, [*starts[1:], len(lines)], strict=False):
        change, problem = parse_section(lines[start:end])
        if problem is not None:
            problems.append((change.path, problem))
        else:
            changes.append(change)
    seen: set[str] = set()
    for change in changes:
        if change.path in seen:
            problems.append((change.path, "the file has two sections in the diff"))
        seen.add(change.path)
    return ParsedPatch(changes=tuple(changes), problems=tuple(problems))


def parse_section(lines: list[str]) -> tuple[FileChange, str | None]:
    """One `diff --git` section: the change and None, or a placeholder change and the problem."""
    path = header_path(lines[0])
    if path is None:
        return FileChange(path=lines[0][len(HEADER):].strip(), text=""), \
            "a quoted, renamed or malformed `diff --git` header"
    flags = {"new_file": False, "deleted": False, "mode_change": False, "renamed": False, "binary": False,
             "special_mode": False}
    index = 1
    while index < len(lines) and not lines[index].startswith(("--- ", "@@")):
        line = lines[index]
        prefix = next((p for p in EXTENDED_HEADERS if line.startswith(p)), None)
        if prefix is None:
            return FileChange(path=path, text=""), f"unexpected header line {line.rstrip()!r}"
        if EXTENDED_HEADERS[prefix] is not None:
            flags[EXTENDED_HEADERS[prefix]] = True
        flags["special_mode"] |= any(mode in line for mode in (SYMLINK_MODE, GITLINK_MODE)) and "mode" in line
        index += 1
        if prefix == "GIT binary patch":
            return FileChange(path=path, text="".join(lines), **flags), None
    body_problem, hunks = _body(path, lines, index, flags)
    return FileChange(path=path, text="".join(lines), hunks=hunks, **flags), body_problem


def _body(path: str, lines: list[str], index: int, flags: dict[str, bool]) -> tuple[str | None, int]:
    """Check the `---`/`+++` names and count the hunks' lines; (problem or None, number of hunks)."""
    if index < len(lines) and lines[index].startswith("--- "):
        if index + 1 >= len(lines) or not lines[index + 1].startswith("+++ "):
            return "`---` without `+++`", 0
        old, new = lines[index][4:].rstrip("\n"), lines[index + 1][4:].rstrip("\n")
        if old not in (f"a/{path}", "/dev/null") or new not in (f"b/{path}", "/dev/null"):
            return f"`---`/`+++` names ({old!r}, {new!r}) differ from the header's path", 0
        flags["new_file"] |= old == "/dev/null"
        flags["deleted"] |= new == "/dev/null"
        index += 2
    hunks = 0
    while index < len(lines):
        match = HUNK_RE.match(lines[index])
        if match is None:
            return f"unexpected line {lines[index].rstrip()!r} outside a hunk", hunks
        index = _hunk_end(lines, index + 1, _count(match.group(2)), _count(match.group(4)))
        if index < 0:
            return "a hunk's lines do not match its `@@` ranges", hunks
        hunks += 1
    return None, hunks


def _count(group: str | None) -> int:
    return 1 if group is None else int(group)


def _hunk_end(lines: list[str], index: int, old: int, new: int) -> int:
    """The index after a hunk of `old` old and `new` new lines starting at `index` (-1 when they do not match)."""
    while old > 0 or new > 0:
        if index >= len(lines):
            return -1
        tag = lines[index][:1]
        if tag in (" ", "\n"):
            old, new = old - 1, new - 1
        elif tag == "-":
            old -= 1
        elif tag == "+":
            new -= 1
        elif tag != NO_NEWLINE_MARK:
            return -1
        if old < 0 or new < 0:
            return -1
        index += 1
    while index < len(lines) and lines[index].startswith(NO_NEWLINE_MARK):
        index += 1
    return index
