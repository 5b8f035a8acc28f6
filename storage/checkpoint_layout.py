"""The layout of a run's checkpoints, on the trainer's disk and in a store: a run folder holds `step-NNNNNN/`
checkpoint folders, each complete once its META_FILE is in (written last), and a LATEST_FILE naming the newest.

`trainer.checkpoints` writes it locally; `storage.checkpoint_store` keeps it in a directory store.
"""

from __future__ import annotations

import re

from storage.errors import StoreError

META_FILE = "harnessrl-checkpoint.json"
"""The trainer state of a checkpoint; written last, it marks the checkpoint folder complete."""
LATEST_FILE = "latest"
"""The file in a run folder that names its newest checkpoint folder."""
STEP_PATTERN = re.compile(r"^step-(\d{6,})$")
"""A checkpoint folder name, as `checkpoint_name` writes it."""


class CheckpointError(StoreError):
    """A checkpoint cannot be written, read or found; the message names the fix."""


def checkpoint_name(step: int) -> str:
    """The folder name of the checkpoint after `step` training steps (`step-000042`), refusing negative steps."""
    if step < 0:
        raise CheckpointError(f"step {step} is negative; pass the number of training steps applied (>= 0)")
    return f"step-{step:06d}"


def step_of(name: str) -> int | None:
    """The step of folder name `name` (`step-000042` → 42), or None when it is not a checkpoint name."""
    match = STEP_PATTERN.match(name)
    return int(match.group(1)) if match else None
