"""Checkpoints on a directory store: a key convention plus a pointer.

Run RUN's checkpoint of policy version N is the folder `RUN/step-NNNNNN`, as on the trainer's disk (complete once
its META_FILE, uploaded last, is in), and `RUN/latest` names the newest; it is written only after the whole upload,
so a half-uploaded checkpoint is never latest nor listed. A run's folder thus has the layout of
`storage.checkpoint_layout` (`trainer.checkpoints.latest_checkpoint(ROOT/RUN)` reads a local one). Checkpoint URIs
(`file:///ROOT/RUN/step-…`, `s3://BUCKET/PREFIX/RUN/step-…`) are what MLflow logs and a resumed run downloads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from storage.checkpoint_layout import LATEST_FILE, META_FILE, CheckpointError, checkpoint_name, step_of
from storage.directory_store import DirectoryStore
from storage.staging import ProgressFn
from storage.uris import KEY_SEGMENT, parse_uri


def check_run_id(run_id: str) -> str:
    """Returns `run_id` when it is usable as one key segment, else raises naming the fix."""
    if not KEY_SEGMENT.match(run_id):
        raise CheckpointError(f"run id {run_id!r} cannot name a checkpoint folder; use 1-128 letters, digits, '.', "
                              "'_' or '-', starting with a letter or digit (an MLflow run id works)")
    return run_id


@dataclass(frozen=True)
class CheckpointStore:
    """Uploads checkpoint folders per run and step, and finds them again by URI."""

    store: DirectoryStore
    """Where the run folders live (a local directory, or a bucket and prefix of an S3 endpoint)."""

    def upload(self, local_dir: Path, run_id: str, policy_version: int, progress: ProgressFn | None = None) -> str:
        """Stores checkpoint `local_dir` as the run's `policy_version` (meta file last), then makes it the run's
        latest; returns its URI."""
        name = checkpoint_name(policy_version)
        uri = self.store.put_dir(Path(local_dir), f"{check_run_id(run_id)}/{name}", META_FILE, progress)
        self.store.put_text(f"{run_id}/{LATEST_FILE}", name + "\n")
        return uri

    def download(self, uri: str, local_dir: Path) -> Path:
        """Copies the checkpoint at `uri` to `local_dir/step-NNNNNN` and returns that path; a complete copy of the same
        checkpoint already there is returned without copying again, anything else there is refused."""
        return self.store.get_dir(uri, Path(local_dir) / PurePosixPath(parse_uri(uri).path).name, META_FILE)

    def latest(self, run_id: str) -> str | None:
        """The URI of the run's last fully uploaded checkpoint, or None before its first upload."""
        pointer = f"{check_run_id(run_id)}/{LATEST_FILE}"
        text = self.store.get_text(pointer)
        if text is None:
            return None
        name = text.strip()
        if step_of(name) is None or not self.store.complete(f"{run_id}/{name}", META_FILE):
            raise CheckpointError(f"{self.store.uri(pointer)} names {name!r}, not a complete checkpoint; fix or "
                                  "remove it")
        return self.store.uri(f"{run_id}/{name}")

    def list(self, run_id: str) -> list[str]:
        """The URIs of the run's complete checkpoints, lowest policy version first."""
        keys = self.store.complete_keys(check_run_id(run_id), META_FILE)
        steps = [(step, key) for key in keys if (step := step_of(key.rsplit("/", 1)[-1])) is not None]
        return [self.store.uri(key) for _, key in sorted(steps)]
