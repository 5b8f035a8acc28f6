"""Reading a tree the policy wrote (a working directory after its harness ended) as hostile input.

Nothing here follows a link or opens anything but a directory or a regular file: every path is opened relative to
its parent's descriptor with `O_NOFOLLOW`, so a link anywhere (the tree's root included) is seen as a link, never
as what it points at. Sizes are checked from metadata before any content is read.

- `survey_tree(root, limits)`: one walk of the tree's metadata (no content read), stopped at the first cap passed
  (`TreeLimits`: entries, total bytes of regular files, one file's bytes, path depth) or at the first link whose
  target resolves outside the tree (following the tree's own links, as the kernel would); names that are not UTF-8
  are refused too (nothing downstream can carry them). The result names the problem (`TreeProblem`: `tamper` for a
  way out of the tree, `limit` for a cap, with the cap's name, `unreadable` for a name no report can carry) or lists
  the tree.
- `read_file(root, relative, max_bytes)`: one regular file's bytes, no link followed on the way, at most `max_bytes`.
- `resolves_inside(link, target, links)`: the pure resolution the survey uses.

FIFOs, sockets and device files are refused by the survey (`unreadable`, the agent's failure) before any grader
reads the tree, and never opened: a FIFO blocks its reader until the grader times out, which would let the policy
trade a bad verdict for a grader failure.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

MAX_LINK_HOPS = 40  # the kernel's own limit on links followed while resolving one path
PATH_MAX_CHARS = 4096  # the kernel's PATH_MAX
MAX_LINK_STEPS = 1_000_000  # components one survey resolves across all its links (about a second of work)
OPEN_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
OPEN_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
EntryKind = Literal["dir", "file", "link", "other"]
ProblemKind = Literal["tamper", "limit", "unreadable"]


@dataclass(frozen=True)
class TreeLimits:
    """What a grader accepts of a tree before it reads any content (each a cap; past one, the attempt is refused)."""

    max_entries: int = 50_000  # files, directories, links and others, together
    max_total_bytes: int = 512 << 20  # the sum of the regular files' sizes
    max_file_bytes: int = 64 << 20  # one regular file's size
    max_depth: int = 48  # path components below the root
    max_link_steps: int = MAX_LINK_STEPS  # path components resolved across all the tree's links


@dataclass(frozen=True)
class TreeEntry:
    """One entry of a surveyed tree."""

    path: str  # relative POSIX path
    kind: EntryKind  # what it is (never followed)
    size_bytes: int = 0  # a regular file's size
    target: str | None = None  # a link's target, as written


@dataclass(frozen=True)
class TreeProblem:
    """Why a tree is refused."""

    kind: ProblemKind  # tamper: a way out of the tree; limit: a cap passed; unreadable: a name or file no reader
    # can carry (a name that is not UTF-8, a FIFO, socket or device file)
    reason: str  # for humans: what was found and where
    cap: str | None = None  # the TreeLimits field passed (kind "limit")


@dataclass(frozen=True)
class TreeSurvey:
    """A tree's metadata, or why it is refused (then `entries` holds what was seen before the walk stopped)."""

    entries: tuple[TreeEntry, ...] = ()
    total_bytes: int = 0  # the sum of the regular files' sizes seen
    problem: TreeProblem | None = None
    links: Mapping[str, str] = field(default_factory=dict)  # relative path -> target, of every link seen


class TreeRefused(Exception):
    """A read that would leave the tree, open a non-file or pass a cap; `problem` says which."""

    def __init__(self, problem: TreeProblem) -> None:
        super().__init__(problem.reason)
        self.problem = problem


class _Walk:
    """State of one survey (counts, entries) and the checks applied to each entry."""

    def __init__(self, limits: TreeLimits) -> None:
        self.limits, self.entries, self.links, self.total_bytes = limits, [], {}, 0

    def add(self, relative: str, st: os.stat_result, target: str | None) -> None:
        """Record one entry; raises TreeRefused at the first cap it passes."""
        limits = self.limits
        if len(self.entries) >= limits.max_entries:
            raise _limit("max_entries", f"more than {limits.max_entries} entries")
        if relative.count("/") + 1 > limits.max_depth:
            raise _limit("max_depth", f"{relative[:200]!r} is deeper than {limits.max_depth} components")
        kind = _kind(st.st_mode)
        if kind == "other":
            raise TreeRefused(TreeProblem("unreadable", f"{relative[:200]!r} is a {special_kind(st.st_mode)}: a "
                                          "working directory may hold only files, folders and links"))
        size = st.st_size if kind == "file" else 0
        if size > limits.max_file_bytes:
            raise _limit("max_file_bytes", f"{relative[:200]!r} holds {size} bytes, over {limits.max_file_bytes}")
        self.total_bytes += size
        if self.total_bytes > limits.max_total_bytes:
            raise _limit("max_total_bytes", f"the files hold more than {limits.max_total_bytes} bytes")
        self.entries.append(TreeEntry(relative, kind, size, target))
        if target is not None:
            self.links[relative] = target


def _limit(cap: str, reason: str) -> TreeRefused:
    return TreeRefused(TreeProblem("limit", f"the tree is past the cap {cap}: {reason}", cap))


def _tamper(reason: str) -> TreeRefused:
    return TreeRefused(TreeProblem("tamper", reason))


def _kind(mode: int) -> EntryKind:
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "link" if stat.S_ISLNK(mode) else "other"


def special_kind(mode: int) -> str:
    """What a file that is neither a regular file, a folder nor a link is, for a reason."""
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "device file" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "special file"


def _name(raw: bytes, parent: str) -> str:
    """A directory entry's name as text; a name that is not UTF-8 is refused (no report or diff can carry it)."""
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        where = f"under {parent!r}" if parent else "at the top"
        raise TreeRefused(TreeProblem("unreadable", f"a name that is not UTF-8 ({raw[:80]!r}) {where}")) from None
    return f"{parent}/{name}" if parent else name


def open_root(root: Path) -> int:
    """A descriptor of `root` itself; a root that is a link (or not a directory) is refused."""
    try:
        return os.open(root, OPEN_DIR_FLAGS)
    except OSError as error:
        kind = "a link" if root.is_symlink() else f"not an openable directory ({error.strerror})"
        raise _tamper(f"{root.name!r} is {kind}; only a real directory is read") from None


def survey_tree(root: Path, limits: TreeLimits = TreeLimits()) -> TreeSurvey:
    """The metadata of every entry under `root` (nothing followed, nothing read), or the first problem."""
    walk = _Walk(limits)
    try:
        fd = open_root(root)
        try:
            _walk_dir(fd, "", walk)
        finally:
            os.close(fd)
        budget = _Budget(limits.max_link_steps)
        for link, target in walk.links.items():
            if not resolves_inside(link, target, walk.links, absolute_root=str(root.absolute()), budget=budget):
                raise _tamper(f"the link {link!r} -> {target[:200]!r} resolves outside the tree")
    except TreeRefused as refused:
        return TreeSurvey(tuple(walk.entries), walk.total_bytes, refused.problem, dict(walk.links))
    except OSError as error:  # a tree the walk cannot read (a name too long, a directory vanishing): its writer's
        problem = TreeProblem("unreadable", f"the tree cannot be walked: {error.strerror} ({error.errno})")
        return TreeSurvey(tuple(walk.entries), walk.total_bytes, problem, dict(walk.links))
    return TreeSurvey(tuple(walk.entries), walk.total_bytes, None, dict(walk.links))


def _walk_dir(fd: int, relative: str, walk: _Walk) -> None:
    """Record the entries of the directory open as `fd` (at `relative`), depth first; links never followed."""
    with os.scandir(fd) as listing:  # lazily: a directory of millions of names stops at the cap, unread
        for entry in listing:
            _visit(fd, entry.name, relative, walk)


def _visit(fd: int, name: str, relative: str, walk: _Walk) -> None:
    """Record `name` of the directory open as `fd` (its name as the file system has it: not UTF-8 shows as
    surrogate escapes), and walk it when it is a directory."""
    path = _name(os.fsencode(name), relative)
    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    target = _text(os.readlink(name, dir_fd=fd)) if stat.S_ISLNK(st.st_mode) else None
    walk.add(path, st, target)
    if stat.S_ISDIR(st.st_mode):
        child = os.open(name, OPEN_DIR_FLAGS, dir_fd=fd)
        try:
            _walk_dir(child, path, walk)
        finally:
            os.close(child)


def _text(target: str) -> str:
    """A link target as text (bytes that are not UTF-8 replaced: it is only compared and reported, never opened)."""
    return os.fsencode(target).decode("utf-8", "replace")


class _Budget:
    """Components one survey may resolve across all its links (a chain of long link targets multiplies them)."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def spend(self, count: int) -> None:
        self.steps -= count
        if self.steps < 0:
            raise _limit("max_link_steps", "its links take more resolving than the cap allows (chains of long link "
                                           "targets)")


def resolves_inside(link: str, target: str, links: Mapping[str, str], *, absolute_root: str | None = None,
                    budget: _Budget | None = None) -> bool:
    """Whether the link at relative path `link`, pointing at `target`, resolves to a path inside the tree when the
    tree's own `links` (relative path -> target) are followed on the way, as the kernel would. An absolute target is
    inside only when it names a path under `absolute_root` (the tree's own absolute path). Each component resolved
    costs one step of `budget` (TreeRefused past it)."""
    budget = budget or _Budget(MAX_LINK_STEPS)
    pending = _start(target, absolute_root)
    if pending is None:
        return False
    resolved: list[str] = [] if target.startswith("/") else _prefixes(link.split("/")[:-1])  # "a", "a/b", ...
    hops = 0
    queue = deque(pending)
    budget.spend(len(queue))
    while queue:
        part = queue.popleft()
        if part in ("", "."):
            continue
        if part == "..":
            if not resolved:
                return False
            resolved.pop()
            continue
        candidate = f"{resolved[-1]}/{part}" if resolved else part
        if len(candidate) > PATH_MAX_CHARS:
            return False  # the kernel refuses a path this long: it leads nowhere inside
        if candidate not in links:
            resolved.append(candidate)
            continue
        hops += 1
        inner = links[candidate]
        restart = _start(inner, absolute_root)
        if hops > MAX_LINK_HOPS or restart is None:
            return False
        budget.spend(len(restart))
        if inner.startswith("/"):
            resolved = []
        queue.extendleft(reversed(restart))
    return True


def _prefixes(parts: list[str]) -> list[str]:
    """The paths of a directory and each of its parents, parents first ("a", "a/b", "a/b/c")."""
    return ["/".join(parts[:index + 1]) for index in range(len(parts))]


def _start(target: str, absolute_root: str | None) -> list[str] | None:
    """The components to resolve for `target`: relative ones as they are, an absolute one relative to the root (None
    when it names a path outside the root)."""
    if not target.startswith("/"):
        return target.split("/")
    root = (absolute_root or "").rstrip("/")
    if not root or not (target == root or target.startswith(root + "/")):
        return None
    return target[len(root):].split("/")


def read_file(root: Path, relative: str, max_bytes: int) -> bytes:
    """The bytes of the regular file at `relative` under `root`, opened without following any link (the root's
    included); TreeRefused when a component is a link or not a directory, the file is not a regular file, or it
    holds more than `max_bytes`. FileNotFoundError when it does not exist."""
    parts = [part for part in relative.split("/") if part not in ("", ".")]
    if not parts or ".." in parts:
        raise _tamper(f"{relative!r} is not a plain relative path")
    fd = open_root(root)
    try:
        for part in parts[:-1]:
            fd = _descend(fd, part, relative)
        try:
            file_fd = os.open(parts[-1], OPEN_FILE_FLAGS, dir_fd=fd)
        except OSError as error:
            if error.errno == errno.ELOOP:  # the last component is a link
                raise _tamper(f"{relative!r} is a link; it is not followed") from None
            raise
    finally:
        os.close(fd)
    with os.fdopen(file_fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise TreeRefused(TreeProblem("unreadable", f"{relative!r} is not a regular file"))
        if st.st_size > max_bytes:
            raise _limit("max_file_bytes", f"{relative!r} holds {st.st_size} bytes, over {max_bytes}")
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise _limit("max_file_bytes", f"{relative!r} holds more than {max_bytes} bytes")
    return data


def _descend(fd: int, part: str, relative: str) -> int:
    """The descriptor of directory `part` under `fd` (closed once the child is open; left to the caller when the
    child cannot be opened); a link or non-directory is refused."""
    try:
        child = os.open(part, OPEN_DIR_FLAGS, dir_fd=fd)
    except OSError as error:
        if error.errno in (errno.ENOTDIR, errno.ELOOP):
            raise _tamper(f"a component of {relative!r} ({part!r}) is a link or not a directory") from None
        raise
    os.close(fd)
    return child
