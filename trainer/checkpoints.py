"""Training checkpoints: an HF safetensors model directory plus the policy version, step and optimizer state.

A checkpoint `ROOT/step-000042/` (numbered by its policy version, as in the checkpoint store: `storage.checkpoint_
layout`) holds what `save_pretrained` writes (config.json, *.safetensors, generation_config.json), the tokenizer files
copied from the model it was trained from, `harnessrl-checkpoint.json` (`CheckpointMeta`), `optimizer.pt` (the
optimizer's state_dict) and, for a bf16 model, `master_weights.pt` (the fp32 copies the optimizer steps). It is
written into a hidden temporary directory next to it, fsynced, then renamed into place, so a checkpoint directory is
always complete; `ROOT/latest` names the newest one and is replaced atomically too. Any engine that loads HF
directories can serve it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from storage.checkpoint_layout import LATEST_FILE, META_FILE, CheckpointError, checkpoint_name
from storage.files import fsync_dir, write_atomic

OPTIMIZER_FILE = "optimizer.pt"
MASTER_WEIGHTS_FILE = "master_weights.pt"
"""fp32 master weights of a backend that trains a bf16 model (`trainer.backends.master_weights`)."""
TOKENIZER_PATTERNS = (
    "tokenizer*.json",
    "tokenizer.model",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.*",
    "merges.txt",
    "chat_template*",
    "*.tiktoken",
)
"""Files of a model directory that belong to its tokenizer."""


class CheckpointMeta(BaseModel):
    """The trainer state stored with the weights (`harnessrl-checkpoint.json`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format_version: int = Field(default=1, description="Layout of this file.")
    policy_version: int = Field(ge=0, description="Policy version of the weights; engines serve it under this.")
    step: int = Field(ge=0, description="Training steps applied since the base model.")
    optimizer_updates: int = Field(ge=0, description="Optimizer updates applied since the base model.")
    base_model: str = Field(description="The model directory training started from (the KL reference).")
    created_at: float = Field(description="Unix seconds when the checkpoint was written.")


def meta_now(policy_version: int, step: int, optimizer_updates: int, base_model: str | Path) -> CheckpointMeta:
    """The meta of a checkpoint written now by a backend trained from `base_model`."""
    return CheckpointMeta(policy_version=policy_version, step=step, optimizer_updates=optimizer_updates,
                          base_model=str(Path(base_model).resolve()), created_at=time.time())


def save_checkpoint(
    root: Path,
    model: Any,
    optimizer: torch.optim.Optimizer | None,
    meta: CheckpointMeta,
    tokenizer_source: Path,
    master_weights: Mapping[str, torch.Tensor] | None = None,
) -> Path:
    """Atomically writes `root/step-NNNNNN` (see the module docstring) and points `root/latest` at it; with
    `master_weights` (fp32 copies of a bf16 model's parameters) also `master_weights.pt`."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / checkpoint_name(meta.policy_version)
    if final.exists():
        raise CheckpointError(f"checkpoint {final} already exists; save into another root or remove it first")
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=root))
    try:
        model.save_pretrained(str(staging))
        copy_tokenizer_files(Path(tokenizer_source), staging)
        if optimizer is not None:
            torch.save(optimizer.state_dict(), staging / OPTIMIZER_FILE)
        if master_weights is not None:
            torch.save(dict(master_weights), staging / MASTER_WEIGHTS_FILE)
        (staging / META_FILE).write_text(meta.model_dump_json(indent=2))
        _fsync_tree(staging)
        os.rename(staging, final)
        fsync_dir(root)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    write_atomic(root / LATEST_FILE, final.name + "\n")
    return final


def copy_tokenizer_files(source: Path, dest: Path) -> list[str]:
    """Copies the tokenizer files of model directory `source` into `dest`; returns their names."""
    names = sorted({p.name for pattern in TOKENIZER_PATTERNS for p in source.glob(pattern) if p.is_file()})
    if not names:
        raise CheckpointError(
            f"{source} has no tokenizer files ({', '.join(TOKENIZER_PATTERNS)}); pass the model directory "
            "the tokenizer was saved in as tokenizer_source"
        )
    for name in names:
        shutil.copyfile(source / name, dest / name)
    return names


def read_meta(path: Path) -> CheckpointMeta:
    """The trainer state of checkpoint `path`."""
    meta_path = Path(path) / META_FILE
    if not meta_path.is_file():
        raise CheckpointError(f"{path} has no {META_FILE}; resume only from directories written by trainer.checkpoints")
    return CheckpointMeta.model_validate_json(meta_path.read_text())


def load_optimizer_state(path: Path) -> dict[str, Any]:
    """The optimizer state_dict saved in checkpoint `path`."""
    state_path = Path(path) / OPTIMIZER_FILE
    if not state_path.is_file():
        raise CheckpointError(f"{path} has no {OPTIMIZER_FILE}; it was saved without optimizer state")
    return torch.load(state_path, map_location="cpu", weights_only=True)


def load_master_weights(path: Path) -> dict[str, torch.Tensor] | None:
    """The fp32 master weights saved in checkpoint `path`, or None when it has none (an fp32 model's)."""
    state_path = Path(path) / MASTER_WEIGHTS_FILE
    return torch.load(state_path, map_location="cpu", weights_only=True) if state_path.is_file() else None


def latest_checkpoint(root: Path) -> Path | None:
    """The newest complete checkpoint under `root`, or None when there is none."""
    pointer = Path(root) / LATEST_FILE
    if not pointer.is_file():
        return None
    path = Path(root) / pointer.read_text().strip()
    if not (path / META_FILE).is_file():
        raise CheckpointError(f"{pointer} names {path.name}, which is not a complete checkpoint; fix or remove it")
    return path


def _fsync_tree(directory: Path) -> None:
    for path in directory.rglob("*"):
        if path.is_file():
            with path.open("rb") as handle:
                os.fsync(handle.fileno())
    fsync_dir(directory)


def prune_checkpoints(root: Path, keep: int) -> list[Path]:
    """Removes all but the newest `keep` complete checkpoints under `root` (never the one `latest` names)."""
    if keep < 1:
        raise CheckpointError(f"keep={keep}: keep at least the latest checkpoint")
    latest = latest_checkpoint(root)
    found = sorted(p for p in Path(root).glob("step-*") if (p / META_FILE).is_file())
    removed = [p for p in found[:-keep] if p != latest]
    for path in removed:
        shutil.rmtree(path)
    return removed


def step_root(path: Path) -> Path:
    """The `step-NNNNNN` directory a backend's returned checkpoint path lies in (itself for the torch backend, an
    ancestor of `verl/huggingface/` for the verl backend): what is uploaded and resumed from."""
    path = Path(path)
    for candidate in (path, *path.parents):
        if candidate.name.startswith("step-"):
            return candidate
    raise CheckpointError(f"{path} is not inside a step-NNNNNN checkpoint directory; save with a backend's "
                          "save_checkpoint(root)")


VERL_MODEL_DIR = Path("verl") / "huggingface"
"""Where a verl checkpoint keeps its HF model, under the step directory."""


def model_dir(root: Path) -> Path:
    """The HF model directory of the step checkpoint `root`: the root itself (torch backend) or `verl/huggingface/`
    (verl backend): what an engine serves."""
    return Path(root) / VERL_MODEL_DIR if (Path(root) / VERL_MODEL_DIR).is_dir() else Path(root)
