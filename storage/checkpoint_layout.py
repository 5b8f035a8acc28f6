"""The layout of a run's checkpoints, on the trainer's disk and in a store: a run folder holds `step-NNNNNN/`
checkpoint folders, each complete once its META_FILE is in (written last), and a LATEST_FILE naming the newest.

One numbering everywhere: NNNNNN is the checkpoint's policy version (the steps applied since the base model, version
0), the number the gateway records with every call the weights answer. `trainer.checkpoints` writes it locally;
`storage.checkpoint_store` keeps it in a directory store under the same name. (Before this, the store's folders were
numbered by loop iteration; `check_numbering` tells such a checkpoint apart where the two differ.)
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


def checkpoint_name(policy_version: int) -> str:
    """The folder name of the checkpoint of `policy_version` (`step-000042`), refusing negative versions."""
    if policy_version < 0:
        raise CheckpointError(f"policy version {policy_version} is negative; pass the checkpoint's policy version "
                              "(>= 0)")
    return f"step-{policy_version:06d}"


def step_of(name: str) -> int | None:
    """The number of folder name `name` (`step-000042` → 42: its policy version), or None when it is not a
    checkpoint name."""
    match = STEP_PATTERN.match(name)
    return int(match.group(1)) if match else None


def check_numbering(where: str, name: str, policy_version: int) -> None:
    """Refuses a checkpoint folder whose number is not its policy version: an older harnessrl numbered the store's
    folders by loop iteration, and new checkpoints, numbered by version, would land beside (or on) them."""
    number = step_of(name)
    if number is not None and number != policy_version:
        raise CheckpointError(
            f"checkpoint {where} is numbered {number} but holds policy version {policy_version}: an older harnessrl "
            "numbered the store's checkpoints by loop iteration, and this run's next checkpoints, numbered by policy "
            "version, would collide with them. Start a new run (another name) from its weights, "
            f"`--set engine.model={where}` after downloading it, or resume it with the harnessrl version that wrote "
            "it")
