"""SWE-smith, SWE-bench Verified and the generated store's instances, loaded through `datasets` on one path
(rollouts/task_data.py) and normalised (recipes/swe/instances.py).

A source is a hub dataset id (`id` or `id:split`; "hub" names the kind's default id in `HUB_IDS`), a local parquet,
JSONL or JSON file or a directory of them, or "generated": the SWE recipe's store ($HARNESSRL_SWE_STORE, or `store`),
whose instances.jsonl is staged under `cache_dir` with task_data's exact encoding and loaded as a local file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from recipes.swe.generator import INSTANCES_FILE, parse_instances
from recipes.swe.instances import SOURCES, Source, normalize_rows
from rollouts.task_data import GENERATED, TaskDataError, load_source_rows, write_task_rows

HUB = "hub"  # a source naming the kind's default hub dataset
HUB_IDS: dict[str, str] = {"swe-smith": "SWE-bench/SWE-smith", "swe-bench-verified": "SWE-bench/SWE-bench_Verified"}
DEFAULT_SPLITS: dict[str, str] = {"swe-smith": "train", "swe-bench-verified": "test"}


class SweDatasetError(TaskDataError):
    """A SWE dataset that cannot be loaded; the message names the source and the fix."""


def load_swe_dataset(source: str, kind: Source, *, cache_dir: Path, split: str | None = None,
                     limit: int | None = None, store: Path | None = None) -> list[dict[str, Any]]:
    """The first `limit` rows (None: all) of `source`, normalised as `kind` instances."""
    return normalize_rows(load_raw_swe_rows(source, kind, cache_dir=cache_dir, split=split, limit=limit, store=store),
                          kind)


def load_raw_swe_rows(source: str, kind: Source, *, cache_dir: Path, split: str | None = None,
                      limit: int | None = None, store: Path | None = None) -> list[dict[str, Any]]:
    """The first `limit` rows of `source` in the dataset's own columns (what the expectation suites check).

    `split` applies to hub ids without one (default: "train" for SWE-smith, "test" for SWE-bench Verified);
    `store` replaces $HARNESSRL_SWE_STORE for "generated"."""
    if kind not in SOURCES:
        raise SweDatasetError(f"unknown SWE dataset kind {kind!r}; use one of {', '.join(SOURCES)}")
    if source == GENERATED:
        if kind != "swe-smith":
            raise SweDatasetError(f"generated SWE instances are SWE-smith rows, not {kind!r}; load them as "
                                  f"kind 'swe-smith'")
        source = str(stage_store(store if store is not None else default_store(), Path(cache_dir)))
    elif source == HUB:
        source = HUB_IDS[kind]
    return load_source_rows(source, cache_dir=Path(cache_dir), split=split or DEFAULT_SPLITS[kind], count=limit)


def default_store() -> Path:
    """The SWE recipe's store ($HARNESSRL_SWE_STORE, default ~/.cache/harnessrl/swe)."""
    from recipes.swe.recipe import SweRecipe

    return SweRecipe().store


def stage_store(store: Path, cache_dir: Path) -> Path:
    """The store's instances written (task_data's encoding, so values survive Arrow) as a JSONL file under
    `cache_dir`, named by the content's digest; raises naming the store when it holds no instances. The store file is
    read once: the staged rows are the bytes the digest names."""
    path = Path(store) / INSTANCES_FILE
    content = path.read_bytes() if path.is_file() else b""
    if not content.strip():
        raise SweDatasetError(f"no generated SWE instances in {path}; generate them first (SweRecipe(store=...)"
                              f".generate(count, seed), or recipes.swe.generator.generate) or set HARNESSRL_SWE_STORE")
    staged = cache_dir / "generated" / f"swe-store-{hashlib.sha256(content).hexdigest()[:16]}.jsonl"
    if staged.exists():
        return staged
    return write_task_rows(parse_instances(content), staged)
