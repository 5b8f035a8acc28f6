"""The local checkpoint store: `ROOT/RUN/step-NNNNNN/` directories and a `ROOT/RUN/latest` pointer.

Each run's folder has the layout of `trainer.checkpoints`, so `checkpoints.latest_checkpoint(ROOT/RUN)` reads it
too. Uploads and downloads copy into a hidden temporary directory, fsync it and rename it into place, so a
checkpoint directory is always complete; `latest` is replaced atomically after the rename. A download into a folder
that already holds the same checkpoint (same meta file, every file present) reuses it, so a run can resume twice
from one checkpoint.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from storage.checkpoint_uris import (
    CheckpointNotFoundError,
    check_run_id,
    parse_checkpoint_uri,
    step_dir_name,
    step_of,
)
from storage.files import fsync_dir, write_atomic
from trainer.checkpoints import LATEST_FILE, META_FILE, CheckpointError

ProgressFn = Callable[[str, int], None]
"""Called after each file is copied with its path relative to the checkpoint and its size in bytes."""


class LocalCheckpointStore:
    """Checkpoints under a local directory; URIs are `file:///ROOT/RUN/step-NNNNNN`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()

    def upload(self, local_dir: Path, run_id: str, step: int, progress: ProgressFn | None = None) -> str:
        """Copies checkpoint `local_dir` to `ROOT/RUN/step-NNNNNN`, then points `latest` at it; returns its URI."""
        files = checkpoint_files(Path(local_dir))
        run_dir = self.root / check_run_id(run_id)
        final = run_dir / step_dir_name(step)
        if (final / META_FILE).is_file():
            raise CheckpointError(f"{final} already exists; upload under another step or run id")
        run_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=run_dir))
        try:
            copy_files(Path(local_dir), files, staging, progress)
            shutil.rmtree(final, ignore_errors=True)  # without a meta file it is not a checkpoint, only debris
            os.rename(staging, final)
            fsync_dir(run_dir)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        write_atomic(run_dir / LATEST_FILE, final.name + "\n")
        return final.as_uri()

    def download(self, uri: str, local_dir: Path) -> Path:
        """Copies the checkpoint at `uri` to `local_dir/step-NNNNNN` (atomically) and returns that path; a complete
        copy of the same checkpoint already there is returned as it is (see `download_into`)."""
        parsed = parse_checkpoint_uri(uri)
        if parsed.scheme != "file":
            raise CheckpointError(f"{uri!r} is not a file:// URI; download it with the store for its scheme")
        source = Path(parsed.path)
        if not (source / META_FILE).is_file():
            raise CheckpointNotFoundError(f"no complete checkpoint at {uri!r}; list(run_id) shows the available ones")
        files = checkpoint_files(source)
        return download_into(Path(local_dir) / source.name, files, (source / META_FILE).read_bytes(),
                             lambda staging: copy_files(source, files, staging))

    def latest(self, run_id: str) -> str | None:
        """The URI of the run's newest uploaded checkpoint, or None before its first upload."""
        run_dir = self.root / check_run_id(run_id)
        pointer = run_dir / LATEST_FILE
        if not pointer.is_file():
            return None
        path = run_dir / pointer.read_text().strip()
        if not (path / META_FILE).is_file():
            raise CheckpointError(f"{pointer} names {path.name}, which is not a complete checkpoint; fix or remove it")
        return path.as_uri()

    def list(self, run_id: str) -> list[str]:
        """The URIs of the run's complete checkpoints, oldest step first."""
        run_dir = self.root / check_run_id(run_id)
        if not run_dir.is_dir():
            return []
        steps = [
            (step, path)
            for path in run_dir.iterdir()
            if (step := step_of(path.name)) is not None and (path / META_FILE).is_file()
        ]
        return [path.as_uri() for _, path in sorted(steps)]


def checkpoint_files(directory: Path) -> list[str]:
    """The relative paths of the regular files of checkpoint `directory`, sorted, with the meta file last."""
    if not (directory / META_FILE).is_file():
        raise CheckpointError(
            f"{directory} has no {META_FILE}; upload only directories written by trainer.checkpoints.save_checkpoint"
        )
    return files_last(directory, META_FILE)


def files_last(directory: Path, last: str | None = None) -> list[str]:
    """The relative paths of the regular files under `directory`, sorted, with `last` (when given) moved to the end."""
    names = sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())
    if last is None:
        return names
    return [name for name in names if name != last] + [last]


def download_into(final: Path, files: list[str], meta: bytes, fill: Callable[[Path], None]) -> Path:
    """`final` filled by `fill(staging)` in a hidden sibling directory renamed into place; when `final` already holds
    the checkpoint whose meta file is `meta` with every one of `files`, it is returned without downloading again."""
    if reusable_copy(final, files, meta):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        fill(staging)
        os.rename(staging, final)
        fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def reusable_copy(final: Path, files: list[str], meta: bytes) -> bool:
    """Whether `final` holds a complete copy of the checkpoint with meta file bytes `meta` and `files`; False when
    `final` does not exist, raises naming the fix when it holds anything else."""
    if not final.exists():
        return False
    local_meta = final / META_FILE
    if not local_meta.is_file():
        problem = f"has no {META_FILE}, so it is not a complete checkpoint"
    elif local_meta.read_bytes() != meta:
        problem = f"holds another checkpoint (its {META_FILE} differs)"
    elif missing := [name for name in files if not (final / name).is_file()]:
        problem = f"lacks {len(missing)} of the checkpoint's files, e.g. {missing[0]}"
    else:
        return True
    raise CheckpointError(f"{final} already exists but {problem}; remove it or download into another directory")


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
