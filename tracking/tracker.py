"""The `Tracker` seam the training loop logs through, parameter flattening, and an in-memory tracker for tests.

The MLflow implementation lives in `tracking/mlflow_tracker.py` (only `flows/` and its Prefect tasks import MLflow).
"""

from __future__ import annotations

import dataclasses
import json
import numbers
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from tracking.traces import TraceDraft

MAX_PARAM_VALUE_CHARS = 6000
"""MLflow's limit on a parameter value (mlflow.utils.validation.MAX_PARAM_VAL_LENGTH)."""
MAX_TAG_VALUE_CHARS = 8000
"""MLflow's limit on a tag value (mlflow.utils.validation.MAX_TAG_VAL_LENGTH)."""
TRUNCATION_MARKER = "...[truncated]"
"""Ends a value cut to fit a limit."""
RUN_STATUSES = frozenset({"FINISHED", "FAILED", "KILLED"})
"""Statuses `Tracker.end` accepts."""


@runtime_checkable
class Tracker(Protocol):
    """Where a training run records its configuration, metrics, samples of trajectories and tags."""

    @property
    def run_id(self) -> str:
        """The run's id; pass it back to resume the run after a crash."""
        ...

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Record configuration; nested mappings become dotted keys. A logged key keeps its first value."""
        ...

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Record scalar metrics at training step `step`."""
        ...

    def log_text(self, text: str, artifact_file: str) -> None:
        """Store `text` as the artifact `artifact_file` (a relative path, e.g. `trajectories/step-000010.md`)."""
        ...

    def log_dict(self, obj: Any, artifact_file: str) -> None:
        """Store a JSON-able object as the artifact `artifact_file` (`.json`, or `.yaml`/`.yml`)."""
        ...

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Set (or overwrite) run tags."""
        ...

    def log_traces(self, drafts: Sequence[TraceDraft]) -> list[str]:
        """Log rollouts' traces (`tracking.traces.rollout_trace`) in the run's experiment; returns their trace ids."""
        ...

    def end(self, status: str = "FINISHED") -> None:
        """Close the run as FINISHED, FAILED or KILLED."""
        ...


def truncate_value(text: str, max_chars: int) -> str:
    """`text` cut to at most `max_chars` characters, ending with TRUNCATION_MARKER when cut."""
    if len(text) <= max_chars:
        return text
    if max_chars < len(TRUNCATION_MARKER):
        raise ValueError(f"max_chars={max_chars} is shorter than the truncation marker; use at least "
                         f"{len(TRUNCATION_MARKER)}")
    return text[: max_chars - len(TRUNCATION_MARKER)] + TRUNCATION_MARKER


def param_value_text(value: Any) -> str:
    """One leaf value as text: strings and scalars via str(), paths as paths, sequences and sets as JSON."""
    if isinstance(value, str | PurePath):
        return str(value)
    if isinstance(value, list | tuple):
        return json.dumps(list(value), default=str)
    if isinstance(value, set | frozenset):
        return json.dumps(sorted(value, key=str), default=str)
    return str(value)


def _as_mapping(obj: Any) -> Mapping[str, Any] | None:
    """Mappings as they are, dataclass instances and pydantic models as their field dicts, else None."""
    if isinstance(obj, Mapping):
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    dump = getattr(obj, "model_dump", None)
    if callable(dump) and not isinstance(obj, type):
        return dump()
    return None


def flatten_params(obj: Any, prefix: str = "") -> dict[str, str]:
    """Nested config → `{dotted.key: text}` with values cut to MAX_PARAM_VALUE_CHARS.

    Mappings, dataclasses and pydantic models nest; an empty one becomes `"{}"`; everything else is a leaf
    (see `param_value_text`). Two paths that flatten to the same key are an error.
    """
    mapping = _as_mapping(obj)
    if mapping is None:
        if not prefix:
            raise TypeError(f"flatten_params needs a mapping, dataclass or pydantic model at the top, got "
                            f"{type(obj).__name__}; pass prefix='name' to log a single value")
        return {prefix: truncate_value(param_value_text(obj), MAX_PARAM_VALUE_CHARS)}
    if not mapping and prefix:
        return {prefix: "{}"}
    flat: dict[str, str] = {}
    for key, value in mapping.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        for flat_key, text in flatten_params(value, dotted).items():
            if flat_key in flat:
                raise ValueError(f"parameter key {flat_key!r} appears twice after flattening; rename one of the "
                                 "keys so dotted paths stay unique")
            flat[flat_key] = text
    return flat


def check_status(status: str) -> str:
    """`status` if it is a status a run can end with, else a ValueError naming the choices."""
    if status not in RUN_STATUSES:
        raise ValueError(f"run status {status!r} is not one of {sorted(RUN_STATUSES)}")
    return status


def check_artifact_file(artifact_file: str) -> str:
    """`artifact_file` if it is a relative path inside the run's artifacts, else a ValueError."""
    path = PurePath(artifact_file)
    if not artifact_file or path.is_absolute() or ".." in path.parts:
        raise ValueError(f"artifact_file {artifact_file!r} must be a relative path without '..', "
                         "e.g. 'trajectories/step-000010.md'")
    return artifact_file


def metric_value(key: str, value: Any) -> float:
    """`value` as a float; a ValueError naming `key` when it is not a real number (NaN and inf are numbers)."""
    if not isinstance(value, numbers.Real):
        raise ValueError(f"metric {key!r} has the non-numeric value {value!r} ({type(value).__name__}); log a float, "
                         "e.g. tensor.item()")
    return float(value)
