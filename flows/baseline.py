"""The step-0 validation shared by runs that would measure the same thing (`algorithm.step0_file`).

Before its first update a run validates the weights it starts from on its validation set. Runs that start from the same
weights and validate the same tasks the same way (an ablation's arms and seeds: one base model, one seeded validation
set, arms that change only how the policy is trained) would each measure the same number, up to the engine's batching;
the first of them records its step-0 metrics in the file under a fingerprint of everything that reaches validation,
and the others log those metrics at step 0 instead of validating again (tagged `step0_from` with the run that measured
them). A run whose fingerprint differs (another model, task, temperature, harness setting or failure reward) finds
no entry and validates for itself. Pure functions and the file's read and write; the loop calls them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flows.config import RunConfig
from storage.files import write_atomic


@dataclass(frozen=True)
class SharedBaseline:
    """Step-0 validation metrics recorded by an earlier run."""

    run: str
    """The run that measured them."""
    metrics: dict[str, float]
    """Its step-0 validation metrics (`val/...`)."""


def validation_fingerprint(config: RunConfig, val_rows: Sequence[Mapping[str, Any]], start_model: Path,
                           policy_version: int) -> str:
    """A hash of what step 0 depends on: the weights started from, the recipe, the validation tasks, and every
    setting of the rollout, engine, gateway and controller (some only shape training, which errs towards validating
    again), and the reward a failure counts as in the metrics."""
    inputs = {"start_model": str(start_model), "policy_version": policy_version, "recipe": config.recipe_label(),
              "val_rows": list(val_rows),
              "sections": config.model_dump(mode="json", include={"rollout", "engine", "gateway", "controller"}),
              "failure_reward": config.algorithm.advantage.reported_failure_reward}
    text = json.dumps(inputs, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def read_baseline(path: Path, fingerprint: str) -> SharedBaseline | None:
    """The entry recorded under `fingerprint`, or None (no file, or no run with this fingerprint yet)."""
    entry = _entries(path).get(fingerprint)
    if entry is None:
        return None
    return SharedBaseline(str(entry["run"]), {str(k): float(v) for k, v in entry["metrics"].items()})


def record_baseline(path: Path, fingerprint: str, run: str, metrics: Mapping[str, float]) -> None:
    """Adds (or replaces) the entry for `fingerprint`; the file's other entries stay."""
    entries = _entries(path)
    entries[fingerprint] = {"run": run, "metrics": {k: float(v) for k, v in metrics.items()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(entries, indent=2, sort_keys=True))


def _entries(path: Path) -> dict[str, Any]:
    """The file's entries ({} when it does not exist); ValueError naming the file when it is not one of ours."""
    if not path.is_file():
        return {}
    try:
        entries = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"algorithm.step0_file {path}: not JSON ({exc}); delete it and the next run validates "
                         "step 0 again") from exc
    if not isinstance(entries, dict) or not all(isinstance(e, dict) and {"run", "metrics"} <= e.keys()
                                                 for e in entries.values()):
        raise ValueError(f"algorithm.step0_file {path}: not a step-0 file (fingerprint -> {{run, metrics}}); point "
                         "the setting at a file of its own")
    return entries
