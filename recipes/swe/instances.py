"""The normalised SWE instance: one schema for SWE-smith, SWE-bench Verified and the generated store, and reversing
unified diffs (SWE-smith's `patch` is the bug; its reverse is the fix).

A normalised instance is a JSON-able dict with exactly the keys of `INSTANCE_KEYS`:
instance_id (str), source ("swe-smith" | "swe-bench-verified"), repo (str, "" when the row has none),
base_commit, problem_statement (str, "" when missing: the cleaning step drops it), FAIL_TO_PASS and PASS_TO_PASS
(list[str]), image_name, bug_patch (SWE-smith's `patch`), fix_patch (SWE-bench's `patch`, or the reverse of the bug),
test_patch, created_at, version, environment_setup_commit (each str or None), level (the generator's difficulty-ladder
level, int; None for other rows).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

Source = Literal["swe-smith", "swe-bench-verified"]
SOURCES: tuple[str, ...] = ("swe-smith", "swe-bench-verified")
INSTANCE_KEYS = ("instance_id", "source", "repo", "base_commit", "problem_statement", "FAIL_TO_PASS", "PASS_TO_PASS",
                 "image_name", "bug_patch", "fix_patch", "test_patch", "created_at", "version",
                 "environment_setup_commit", "level")
TEST_FIELDS = ("FAIL_TO_PASS", "PASS_TO_PASS")
NO_NEWLINE_MARK = "\\ No newline at end of file"
FILE_KINDS = {"new file mode ": "deleted file mode ", "deleted file mode ": "new file mode "}
PAIRED_FIELDS = (("old mode ", "new mode "), ("rename from ", "rename to "))  # header lines that swap values
HUNK_HEADER = re.compile(r"^@@ -(\d+(?:,\d+)?) \+(\d+(?:,\d+)?) @@(.*)$")


class InstanceError(ValueError):
    """A dataset row that cannot be normalised; the message names the instance, the field and the fix."""


def normalize_instance(row: Mapping[str, Any], source: Source) -> dict[str, Any]:
    """`row` (a SWE-smith or SWE-bench Verified row, in the dataset's own columns) in the normalised schema."""
    if source not in SOURCES:
        raise InstanceError(f"unknown source {source!r}; use one of {', '.join(SOURCES)}")
    instance_id = row.get("instance_id")
    if not isinstance(instance_id, str) or not instance_id.strip():
        raise InstanceError(f"a {source} row has no instance_id (got {instance_id!r}; row keys: "
                            f"{', '.join(sorted(row))}); every row needs a non-empty instance_id")
    patch = _text(row, "patch", instance_id)
    smith = source == "swe-smith"
    return {
        "instance_id": instance_id,
        "source": source,
        "repo": _text(row, "repo", instance_id) or "",
        "base_commit": _text(row, "base_commit", instance_id),
        "problem_statement": _text(row, "problem_statement", instance_id) or "",
        "FAIL_TO_PASS": parse_test_list(row.get("FAIL_TO_PASS"), instance_id, "FAIL_TO_PASS"),
        "PASS_TO_PASS": parse_test_list(row.get("PASS_TO_PASS"), instance_id, "PASS_TO_PASS"),
        "image_name": _text(row, "image_name", instance_id),
        "bug_patch": patch if smith else None,
        "fix_patch": (reverse_patch(patch) if patch else None) if smith else patch,
        "test_patch": _text(row, "test_patch", instance_id),
        "created_at": _timestamp_text(row.get("created_at"), instance_id),
        "version": _text(row, "version", instance_id),
        "environment_setup_commit": _text(row, "environment_setup_commit", instance_id),
        "level": row.get("level"),  # the generator's difficulty-ladder level (recipes/swe/ladder.py); None elsewhere
    }


def normalize_rows(rows: list[Mapping[str, Any]], source: Source) -> list[dict[str, Any]]:
    """Every row normalised, in order."""
    return [normalize_instance(row, source) for row in rows]


def parse_test_list(value: Any, instance_id: str, field: str) -> list[str]:
    """A test list stored as a list of strings or as JSON text of one."""
    parsed = value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as error:
            raise InstanceError(f"instance {instance_id!r}: {field} is not valid JSON ({error.msg}): "
                                f"{value[:80]!r}; store it as a list of test ids or JSON text of one") from error
    if isinstance(parsed, list | tuple) and all(isinstance(item, str) for item in parsed):
        return list(parsed)
    raise InstanceError(f"instance {instance_id!r}: {field} must be a list of test ids (strings) or JSON text of "
                        f"one, got {type(value).__name__} {str(value)[:80]!r}")


def _text(row: Mapping[str, Any], field: str, instance_id: str) -> str | None:
    value = row.get(field)
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise InstanceError(f"instance {instance_id!r}: {field} must be text, got {type(value).__name__} "
                        f"{str(value)[:80]!r}")


def _timestamp_text(value: Any, instance_id: str) -> str | None:
    """Text kept as is; a timestamp (Arrow's JSON reader reads ISO text as one, in UTC) as ISO text ending in Z."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, datetime):
        utc = value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
        return utc.isoformat(timespec="microseconds" if utc.microsecond else "seconds") + "Z"
    raise InstanceError(f"instance {instance_id!r}: created_at must be text or a timestamp, got "
                        f"{type(value).__name__} {value!r}")


def reverse_patch(patch: str) -> str:
    """The unified (git) diff undoing `patch`: paths, modes, index hashes, hunk ranges and +/- lines swapped;
    new files become deleted ones and back; "\\ No newline at end of file" stays with its line."""
    lines = patch.split("\n")
    out: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        match = HUNK_HEADER.match(line)
        if match:
            old_range, new_range, tail = match.groups()
            out.append(f"@@ -{new_range} +{old_range} @@{tail}")
            body, index = _hunk_lines(lines, index + 1, _count(old_range), _count(new_range))
            out.extend(_reversed_hunk(body))
            continue
        if line.startswith("diff --git "):
            header, index = _file_header(lines, index)
            out.extend(_reversed_header(header))
            continue
        if line.startswith("--- ") and index + 1 < len(lines) and lines[index + 1].startswith("+++ "):
            out.extend(_reversed_names(line, lines[index + 1]))
            index += 2
            continue
        out.append(line)
        index += 1
    return "\n".join(out)


def _count(hunk_range: str) -> int:
    """Lines a hunk range spans ("12,3" -> 3; "12" -> 1)."""
    return int(hunk_range.split(",")[1]) if "," in hunk_range else 1


def _hunk_lines(lines: list[str], start: int, old_count: int, new_count: int) -> tuple[list[str], int]:
    """The hunk body from `start` (each line's old/new share counted) and the index after it."""
    index = start
    while (old_count > 0 or new_count > 0) and index < len(lines):
        line = lines[index]
        if line.startswith("-"):
            old_count -= 1
        elif line.startswith("+"):
            new_count -= 1
        elif line.startswith(" ") or line == "":  # context (some tools strip the space of blank context lines)
            old_count, new_count = old_count - 1, new_count - 1
        elif not line.startswith("\\"):
            raise ValueError(f"patch hunk line {index + 1} is {line[:60]!r}, expected ' ', '-', '+' or '\\'; "
                             f"the hunk's line counts do not match its header")
        index += 1
    if old_count > 0 or new_count > 0:
        raise ValueError("patch ends inside a hunk (its header counts more lines than follow); pass the whole patch")
    while index < len(lines) and lines[index].startswith(NO_NEWLINE_MARK):
        index += 1
    return lines[start:index], index


def _reversed_hunk(body: list[str]) -> list[str]:
    """Signs swapped; in each run of changes the (new) removed lines come before the added ones."""
    out: list[str] = []
    removed: list[str] = []
    added: list[str] = []
    previous: list[str] | None = None
    for line in body:
        if line.startswith(NO_NEWLINE_MARK):
            (previous if previous is not None else out).append(line)
            continue
        if line.startswith("+"):
            previous = removed
            removed.append("-" + line[1:])
        elif line.startswith("-"):
            previous = added
            added.append("+" + line[1:])
        else:
            out.extend(removed + added)
            removed, added, previous = [], [], out
            out.append(line)
    return out + removed + added


def _file_header(lines: list[str], start: int) -> tuple[list[str], int]:
    """The extended header from `diff --git` up to (and with) the `---`/`+++` pair, or up to the next file/hunk."""
    index = start + 1
    while index < len(lines):
        line = lines[index]
        if line.startswith(("diff --git ", "@@ ")):
            break
        if line.startswith("--- ") and index + 1 < len(lines) and lines[index + 1].startswith("+++ "):
            index += 2
            break
        if line.startswith(("GIT binary patch", "Binary files ")):
            raise ValueError(f"cannot reverse a binary diff ({lines[start][11:]}); regenerate the patch as text")
        if line.startswith(("copy from ", "copy to ")):
            raise ValueError(f"cannot reverse a copy ({lines[start][11:]}); regenerate the patch without -C")
        index += 1
    return lines[start:index], index


def _reversed_header(header: list[str]) -> list[str]:
    """A file's extended header undone: paths, new/deleted file, mode pair, rename pair and index hashes swapped."""
    old_path, new_path = _git_paths(header[0])
    out = [f"diff --git a/{new_path} b/{old_path}"]
    body = header[1:]
    names = body[-2:] if len(body) >= 2 and body[-2].startswith("--- ") and body[-1].startswith("+++ ") else []
    done: set[tuple[str, str]] = set()
    for line in body[:len(body) - len(names)]:
        pair = next((pair for pair in PAIRED_FIELDS if line.startswith(pair)), None)
        if line.startswith("index "):
            hashes, _, mode = line[len("index "):].partition(" ")
            old_hash, _, new_hash = hashes.partition("..")
            out.append(f"index {new_hash}..{old_hash}" + (f" {mode}" if mode else ""))
        elif line.startswith(tuple(FILE_KINDS)):
            kind = next(kind for kind in FILE_KINDS if line.startswith(kind))
            out.append(FILE_KINDS[kind] + line[len(kind):])
        elif pair is None:
            out.append(line)
        elif pair not in done:  # "old mode A"/"new mode B" -> "old mode B"/"new mode A"; renames likewise
            done.add(pair)
            first, second = pair
            out += [prefix + value for prefix, value in ((first, _field(body, second)), (second, _field(body, first)))
                    if value is not None]
    return out + (_reversed_names(*names) if names else [])


def _field(lines: list[str], prefix: str) -> str | None:
    """The value of the header line starting with `prefix`, if any."""
    return next((line[len(prefix):] for line in lines if line.startswith(prefix)), None)


def _git_paths(line: str) -> tuple[str, str]:
    """(old, new) path of a `diff --git a/<old> b/<new>` line."""
    rest = line[len("diff --git "):]
    half = (len(rest) - 1) // 2
    if rest.startswith("a/") and rest[half:half + 3] == " b/" and rest[2:half] == rest[half + 3:]:
        return rest[2:half], rest[half + 3:]  # the same path on both sides (paths may hold " b/")
    old, separator, new = rest.partition(" b/")
    if not separator or not old.startswith("a/"):
        raise ValueError(f"cannot read the paths of {line!r}; expected 'diff --git a/<path> b/<path>'")
    return old[2:], new


def _reversed_names(old_line: str, new_line: str) -> list[str]:
    """`--- <old>` / `+++ <new>` swapped, the a/ and b/ prefixes kept on their sides."""
    old_name, new_name = old_line[4:], new_line[4:]
    return [f"--- {_prefixed(new_name, 'a/')}", f"+++ {_prefixed(old_name, 'b/')}"]


def _prefixed(name: str, prefix: str) -> str:
    if name.startswith(("a/", "b/")):
        return prefix + name[2:]
    return name  # /dev/null or a patch without prefixes
