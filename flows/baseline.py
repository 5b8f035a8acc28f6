"""The step-0 validation shared by runs that would measure the same thing (`algorithm.step0_file`).

Before its first update a run validates the weights it starts from on its validation set. Runs that start from the same
weights and validate the same tasks the same way (an ablation's arms and seeds: one base model, one seeded validation
set, arms that change only how the policy is trained) would each measure the same number, up to the engine's batching;
the first of them records its step-0 metrics in the file under a fingerprint of everything that reaches validation,
and the others log those metrics at step 0 instead of validating again (tagged `step0_from` with the run that measured
them). A run whose fingerprint differs (another model, task, temperature, harness setting, failure reward, or code:
the project's, the recipe's or a recipe file's folder, edited since the entry was recorded) finds no entry and
validates for itself. Pure functions and the file's read and write; the loop calls them.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flows.config import RunConfig
from rollouts.registry import get_recipe, is_file_reference
from storage.files import write_atomic

PACKAGES = ("controller", "engines", "flows", "gateway", "harnessrl", "recipes", "rollouts", "sandbox", "storage",
            "tracking", "trainer")
"""The project's packages (pyproject.toml's `packages.find`), wherever they are installed."""
SOURCE_SUFFIXES = frozenset({".py", ".yaml", ".yml", ".jinja", ".toml", ".txt", ".sh", ".js", ".json"})
"""Files whose content is code or a prompt; every other file counts by name, size and modification time."""
SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "tests", "benchmarks", "runs", "mlruns", "checkpoints"})
"""Folders that cannot change what validation measures (besides hidden ones and virtual environments)."""
MAX_SOURCE_BYTES = 1 << 20
"""A larger source file counts by name, size and modification time, not content."""


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
    inputs = {"start_model": str(start_model), "start_files": file_stats(start_model),
              "policy_version": policy_version, "recipe": config.recipe_label(),
              "code": source_digest(code_roots(config.recipe)), "val_rows": list(val_rows),
              "sections": config.model_dump(mode="json", include={"rollout", "engine", "gateway", "controller"}),
              "failure_reward": config.algorithm.advantage.reported_failure_reward}
    text = json.dumps(inputs, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def code_roots(recipe: str) -> list[Path]:
    """The folders whose code a run's validation runs: the project's packages, and the recipe's own folder where it
    lives elsewhere (a recipe file's folder: its harness, grader and prompts; an installed or user module's package)."""
    roots = [Path(importlib.import_module(name).__path__[0]).resolve() for name in PACKAGES]
    if is_file_reference(recipe):
        roots.append(Path(recipe).resolve().parent)
    else:
        module = sys.modules.get(type(get_recipe(recipe)).__module__)
        if module is not None and getattr(module, "__file__", None):
            roots.append(Path(module.__file__).resolve().parent)
    return sorted({root for root in roots if not any(root.is_relative_to(other) and root != other
                                                     for other in roots)})


def source_digest(roots: Sequence[Path]) -> str:
    """A hash of the source files under `roots` (path and content), so that an edit to any of them is a new
    fingerprint; hidden folders, virtual environments and SKIPPED_DIRS are not walked."""
    digest = hashlib.sha256()
    for root in roots:
        for path in _source_files(root):
            digest.update(f"{root.name}/{path.relative_to(root)}\0".encode())
            stat = path.stat()
            if path.suffix in SOURCE_SUFFIXES and stat.st_size <= MAX_SOURCE_BYTES:
                digest.update(path.read_bytes())
            else:
                digest.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
            digest.update(b"\0")
    return digest.hexdigest()


def file_stats(folder: Path) -> list[tuple[str, int, int]]:
    """(name, size, modification time) of each file directly in `folder` (the start weights: rewritten in place,
    they are another start); [] when it is not a folder."""
    if not folder.is_dir():
        return []
    stats = ((p.name, p.stat()) for p in folder.iterdir() if p.is_file())
    return sorted((name, stat.st_size, stat.st_mtime_ns) for name, stat in stats)


def _source_files(root: Path) -> Iterator[Path]:
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not d.startswith("venv")
                         and d not in SKIPPED_DIRS)
        for name in sorted(files):
            path = Path(folder) / name
            if not name.startswith(".") and path.is_file() and not path.is_symlink():
                yield path


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
