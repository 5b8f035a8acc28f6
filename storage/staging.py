"""Folders put in place atomically: filled in a hidden staging sibling, fsynced, renamed into place. A folder to be
filled from a store is reused when it already holds a complete copy of the same folder and refused naming the fix when
it holds anything else. Shared by the local store (put and get) and the S3 store (get)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from storage.errors import StoreError
from storage.files import fsync_dir

ProgressFn = Callable[[str, int], None]
"""Called after each file is stored with its path relative to the folder and its size in bytes."""


def folder_files(directory: Path, marker: str) -> list[str]:
    """The relative paths of the regular files under `directory`, sorted, `marker` last; raises when it is missing."""
    if not (directory / marker).is_file():
        raise StoreError(f"{directory} has no {marker}; write it (it marks the folder complete) before storing the "
                         "folder, e.g. save checkpoints with trainer.checkpoints.save_checkpoint")
    names = sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())
    return [name for name in names if name != marker] + [marker]


def copy_files(source: Path, files: list[str], dest: Path, progress: ProgressFn | None = None) -> None:
    """Copies each of `files` (relative paths) from `source` to `dest`, fsyncing every file and then `dest`."""
    for name in files:
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / name, target)
        with target.open("rb") as handle:
            os.fsync(handle.fileno())
        if progress is not None:
            progress(name, target.stat().st_size)
    fsync_dir(dest)


def place(final: Path, fill: Callable[[Path], None]) -> Path:
    """`final` filled by `fill(staging)` in a hidden sibling renamed into place; what was at `final` before (debris
    of an interrupted put, or an empty folder: the caller checked) is replaced, the staging removed on failure."""
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        fill(staging)
        shutil.rmtree(final, ignore_errors=True)
        os.rename(staging, final)
        fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def get_into(dest: Path, uri: str, sizes: dict[str, int], marker: str, marker_bytes: bytes,
             fill: Callable[[Path], None]) -> Path:
    """`dest` as a copy of the folder at `uri`, whose files have `sizes` and whose `marker` holds `marker_bytes`,
    filled by `fill(staging)`; a complete copy already at `dest` is returned as it is."""
    if not reusable_copy(dest, uri, sizes, marker, marker_bytes):
        place(dest, fill)
    return dest


def reusable_copy(dest: Path, uri: str, sizes: dict[str, int], marker: str, marker_bytes: bytes) -> bool:
    """Whether `dest` holds a complete copy of the folder at `uri` (the same marker bytes, every file at its size);
    False when `dest` is missing or empty, raises naming the fix when it holds anything else."""
    if not dest.exists() or (dest.is_dir() and not any(dest.iterdir())):
        return False
    if not (dest / marker).is_file():
        problem = f"has no {marker}, so it is not a complete copy"
    elif (dest / marker).read_bytes() != marker_bytes:
        problem = f"holds another folder (its {marker} differs from the one at {uri!r})"
    elif changed := [name for name, size_bytes in sizes.items()
                     if not (dest / name).is_file() or (dest / name).stat().st_size != size_bytes]:
        problem = f"lacks or changed {len(changed)} of its files, e.g. {changed[0]}"
    else:
        return True
    raise StoreError(f"{dest} already exists but {problem}; remove it or download into a new or empty directory")
