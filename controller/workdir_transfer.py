"""Packing a working directory as a gzipped tar and unpacking one safely (the KubernetesRunner's workdir transfer).

Unpacking refuses anything that could land outside the target: absolute names, `..`, links leaving the tree,
hard links, devices and FIFOs. A refused archive raises `UnsafeArchiveError` naming the member.
"""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path, PurePosixPath

from sandbox.hostile_tree import TreeLimits

WORKDIR_ARCHIVE = "workdir.tar.gz"  # the prepared working directory, controller -> pod
RESULT_ARCHIVE = "result.tar.gz"  # the working directory after the harness, pod -> controller
DEFAULT_MAX_UNPACKED_BYTES = TreeLimits().max_total_bytes  # what the grader accepts of a tree (the pod's archive
DEFAULT_MAX_MEMBERS = TreeLimits().max_entries  # is the agent's tree: the same caps, before anything is written)


class UnsafeArchiveError(ValueError):
    """An archive member would escape the target directory, or the archive is not a usable tar.gz."""


def pack_workdir(workdir: Path) -> bytes:
    """The directory's contents (not the directory itself) as tar.gz bytes, names relative, in sorted order."""
    if not workdir.is_dir():
        raise FileNotFoundError(f"cannot pack {workdir}: it is not a directory")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for child in sorted(workdir.iterdir()):
            archive.add(child, arcname=child.name)
    return buffer.getvalue()


def _check_member(member: tarfile.TarInfo, target: Path) -> None:
    name = PurePosixPath(member.name)
    if name.is_absolute() or ".." in name.parts or not name.parts:
        raise UnsafeArchiveError(f"archive member {member.name!r} is absolute or climbs out with '..'; refused")
    if not (target / name).resolve().is_relative_to(target):
        raise UnsafeArchiveError(f"archive member {member.name!r} resolves outside {target}; refused")
    if member.islnk() or not (member.isfile() or member.isdir() or member.issym()):
        raise UnsafeArchiveError(f"archive member {member.name!r} is a hard link, device or FIFO; only files, "
                                 "directories and symlinks inside the tree are accepted")
    if member.issym():
        link = PurePosixPath(member.linkname)
        resolved = (target / name.parent / link).resolve()
        if link.is_absolute() or not resolved.is_relative_to(target):
            raise UnsafeArchiveError(f"symlink {member.name!r} -> {member.linkname!r} points outside the tree; "
                                     "refused")


def unpack_archive(data: bytes, target: Path, *, max_bytes: int = DEFAULT_MAX_UNPACKED_BYTES,
                   max_members: int = DEFAULT_MAX_MEMBERS) -> list[str]:
    """Extract tar.gz `data` into `target` (created if needed) after checking every member; the names extracted."""
    target.mkdir(parents=True, exist_ok=True)
    root = target.resolve()
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            members = []
            for member in archive:  # one at a time: a stream of millions of empty members stops at the cap
                members.append(member)
                if len(members) > max_members:
                    raise UnsafeArchiveError(f"archive holds more than {max_members} members")
            total = sum(m.size for m in members if m.isfile())
            if total > max_bytes:
                raise UnsafeArchiveError(f"archive unpacks to {total} bytes, over the limit of {max_bytes}")
            for member in members:
                _check_member(member, root)
            archive.extractall(root, members=members, filter="data")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise UnsafeArchiveError(f"not a readable tar.gz archive ({type(exc).__name__}: {exc})") from exc
    return [m.name for m in members]


def replace_with_archive(data: bytes, workdir: Path) -> list[str]:
    """Make `workdir` hold exactly the archive's tree: unpack beside it first, so a bad archive changes nothing."""
    staging = workdir.with_name(workdir.name + ".incoming")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        names = unpack_archive(data, staging)
    except UnsafeArchiveError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(workdir, ignore_errors=True)
    staging.rename(workdir)
    return names
