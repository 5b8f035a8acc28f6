"""Atomic, durable file writes: a reader sees the old file or the whole new one, never a part."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary sibling of `path` to write to; when the block ends without error it is synced and renamed over
    `path` (and the directory synced), otherwise removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    os.close(fd)
    staging = Path(name)
    try:
        yield staging
        with staging.open("rb") as handle:
            os.fsync(handle.fileno())
        os.replace(staging, path)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` (UTF-8) atomically and durably."""
    with atomic_path(path) as staging:
        staging.write_text(text, encoding="utf-8")


def fsync_dir(directory: Path) -> None:
    """Make a directory's entries (renames, new files) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
