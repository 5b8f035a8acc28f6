"""SWE-bench predictions: one row per instance, `{"instance_id", "model_name_or_path", "model_patch"}`, as JSONL.

This is the file SWE-bench's harness reads (`python -m swebench.harness.run_evaluation --predictions_path FILE`): one
JSON object per line with exactly those three keys. An instance without a patch (the agent changed nothing, or failed)
has `model_patch` "", which the harness counts as an empty patch. Pure: no network, no processes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from storage.files import write_atomic

PREDICTION_KEYS = ("instance_id", "model_name_or_path", "model_patch")


class Prediction(BaseModel):
    """One SWE-bench prediction row."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instance_id: str = Field(min_length=1, description="The SWE-bench (or SWE-smith) instance id.")
    model_name_or_path: str = Field(min_length=1, description="Names the system; the harness groups logs by it.")
    model_patch: str = Field(description="The diff to apply at the instance's base ('' when there is none).")


def model_label(model: str | None = None, checkpoint_uri: str | None = None) -> str:
    """`model_name_or_path` for a checkpoint (`harnessrl/<run>/<step>` from its URI) or a model name or path."""
    if checkpoint_uri:
        parts = [part for part in checkpoint_uri.split("://", 1)[-1].split("/") if part]
        return "harnessrl/" + "/".join(parts[-2:])
    if model:
        return str(model).rstrip("/")
    raise ValueError("model_label needs a model name or a checkpoint URI; pass one of them")


def prediction_lines(predictions: Iterable[Prediction]) -> str:
    """The JSONL text: one object per line with the three keys in SWE-bench's order; duplicate ids are errors."""
    seen: set[str] = set()
    lines = []
    for prediction in predictions:
        if prediction.instance_id in seen:
            raise ValueError(f"instance {prediction.instance_id!r} has two predictions; keep one per instance")
        seen.add(prediction.instance_id)
        lines.append(json.dumps({key: getattr(prediction, key) for key in PREDICTION_KEYS}) + "\n")
    return "".join(lines)


def write_predictions(predictions: Iterable[Prediction], path: Path) -> Path:
    """Write the predictions file (atomically: a reader sees the old file or the whole new one)."""
    path = Path(path)
    write_atomic(path, prediction_lines(predictions))
    return path


def read_predictions(path: Path) -> list[Prediction]:
    """The rows of a predictions JSONL file; a bad line raises naming the file, the line and the problem."""
    predictions = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            predictions.append(Prediction.model_validate_json(line))
        except ValueError as error:
            raise ValueError(f"{path}:{number} is not a SWE-bench prediction ({PREDICTION_KEYS}): {error}") from error
    return predictions
