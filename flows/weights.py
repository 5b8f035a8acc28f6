"""The weights a flow serves: a checkpoint downloaded from the checkpoint store, or a model resolved by name or path."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from engines.model_cache import resolve_model
from flows.config import RunConfig
from flows.prefect_tasks.evaluation import download_checkpoint
from flows.setup import checkpoint_store
from recipes.swe.predictions import model_label
from storage.checkpoint_store import CheckpointStore
from storage.uris import parse_uri
from trainer.checkpoints import model_dir, read_meta


@dataclasses.dataclass(frozen=True)
class Weights:
    """What the engine serves."""

    path: Path  # the HF model directory
    policy_version: int  # the checkpoint's policy version (0 for a model)
    label: str  # model_name_or_path of the predictions
    checkpoint_uri: str | None  # the evaluated checkpoint (None: a model)


def resolve_weights(config: RunConfig, checkpoint_uri: str | None, model: str | None, run_dir: Path) -> Weights:
    """The checkpoint downloaded through the checkpoint store, or the model resolved (prepared or fetched)."""
    if checkpoint_uri:
        path = download_checkpoint(store_for_checkpoint(config, checkpoint_uri), checkpoint_uri, run_dir / "checkpoint")
        return Weights(model_dir(path), read_meta(path).policy_version, model_label(checkpoint_uri=checkpoint_uri),
                       checkpoint_uri)
    assert model is not None
    return Weights(resolve_model(model), 0, model_label(model=model), None)


def store_for_checkpoint(config: RunConfig, checkpoint_uri: str) -> CheckpointStore:
    """A store that can download `checkpoint_uri`: its bucket on the profile's S3 endpoint, or its local root."""
    parsed = parse_uri(checkpoint_uri)
    root = f"s3://{parsed.bucket}" if parsed.scheme == "s3" else f"file://{Path(parsed.path).parent.parent}"
    checkpoints = config.checkpoints.model_copy(update={"store": root})
    return checkpoint_store(config.model_copy(update={"checkpoints": checkpoints}))
