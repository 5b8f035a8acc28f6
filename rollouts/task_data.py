"""The task rows a training run uses, loaded through `datasets` on one path for every source.

A source is "generated" (the recipe's `generate(count, seed)`, written as JSONL under the cache directory and loaded
back), a local file or directory (`.parquet`, `.jsonl`, `.json`), or a Hugging Face hub dataset id (`id` or
`id:split`, default split "train").

Files written here keep every value exact whatever `datasets` and Arrow infer: a column `c` holding nested values,
mixed types or ISO-date-like text is stored JSON-encoded as the string column `c__json` and decoded back into `c` on
load (user files may use the same convention; in plain user JSON files Arrow reads ISO dates as timestamps). Arrow
tables are rectangular: a key that some rows lack comes back as None in those rows.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from storage.files import atomic_path

GENERATED = "generated"
SPLITS_PREFIX = "splits:"
"""data.source of a versioned SWE split written by `prepare-swe-data`: `splits:file:///…/NAME/VERSION` or s3://."""
JSON_SUFFIX = "__json"  # a column stored JSON-encoded: "instructions__json" holds the "instructions" values
BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}  # file suffix -> datasets builder
DEFAULT_SPLIT = "train"
HF_CACHE_DIR = "hf-datasets"  # under cache_dir: datasets' Arrow cache

Rows = list[dict[str, Any]]


class TaskDataError(ValueError):
    """A task source that cannot be loaded; the message names the source and the fix."""


def load_task_rows(source: str, *, recipe: str, count: int | None, seed: int, cache_dir: Path,
                   generator: dict[str, Any] | None = None) -> Rows:
    """The first `count` rows (None: all) of `source`, each with "recipe" set (kept when the row has one);
    `generator`: keyword options of the recipe's `generate` (generated sources only)."""
    _check_count(count)
    if source == GENERATED:
        source = str(_generated_file(recipe, count, seed, Path(cache_dir), generator or {}))
    rows = load_source_rows(source, cache_dir=cache_dir, count=count)
    return [{**row, "recipe": recipe} if row.get("recipe") is None else row for row in rows]


def load_source_rows(source: str, *, cache_dir: Path, split: str | None = None, count: int | None = None) -> Rows:
    """The first `count` rows (None: all) of a local file or directory, or of a hub dataset (`id` or `id:split`;
    `split` applies when the id names none, default "train"), `__json` columns decoded, no recipe added."""
    _check_count(count)
    cache_dir = Path(cache_dir)
    if _looks_local(source):
        dataset = _local_dataset(Path(source), cache_dir)
    else:
        dataset = _hub_dataset(source, split, cache_dir)
    if count is not None:
        dataset = dataset.select(range(min(count, len(dataset))))
    return decode_rows(dataset.to_list())


def _check_count(count: int | None) -> None:
    if count is not None and count < 0:
        raise TaskDataError(f"count must be >= 0 or None (all rows), got {count}")


def split_rows(rows: Rows, val_count: int, seed: int, stratify: str | None = None) -> tuple[Rows, Rows]:
    """(train, validation): `val_count` rows drawn with `seed` for validation, the rest for training; both keep the
    rows' order. Disjoint, and the same for the same rows and seed. `stratify`: a column whose values (strata) share
    the validation rows in proportion to their sizes (rounded, largest remainders first); one stratum draws as none."""
    if not 0 <= val_count < len(rows):
        raise ValueError(f"val_count must be in [0, {len(rows)}) for {len(rows)} rows (training needs at least one "
                         f"row), got {val_count}; lower val_count or load more rows")
    strata = _strata(rows, stratify)
    if len(strata) > 1:
        held_out = _stratified_held_out(strata, val_count, seed)
    else:
        order = list(range(len(rows)))
        random.Random(f"split_rows:{seed}").shuffle(order)
        held_out = set(order[:val_count])
    train = [row for index, row in enumerate(rows) if index not in held_out]
    val = [row for index, row in enumerate(rows) if index in held_out]
    return train, val


def _strata(rows: Rows, column: str | None) -> dict[str, list[int]]:
    """Row indices by the (text of the) value in `column`; one stratum without a column."""
    strata: dict[str, list[int]] = {}
    for index, row in enumerate(rows):
        strata.setdefault(str(row.get(column)) if column else "", []).append(index)
    return strata


def _stratified_held_out(strata: dict[str, list[int]], val_count: int, seed: int) -> set[int]:
    """`val_count` indices shared among strata in proportion to their sizes, each stratum's drawn with `seed`."""
    total = sum(len(indices) for indices in strata.values())
    exact = {key: val_count * len(indices) / total for key, indices in sorted(strata.items())}
    takes = {key: int(share) for key, share in exact.items()}
    for key in sorted(exact, key=lambda k: (-(exact[k] - takes[k]), k))[:val_count - sum(takes.values())]:
        takes[key] += 1
    held_out: set[int] = set()
    for key, indices in sorted(strata.items()):
        order = list(indices)
        random.Random(f"split_rows:{seed}:{key}").shuffle(order)
        held_out.update(order[:takes[key]])
    return held_out


def write_task_rows(rows: Rows, path: Path) -> Path:
    """Write rows as `.jsonl` or `.parquet` (by suffix), columns that Arrow could change JSON-encoded."""
    path = Path(path)
    if path.suffix not in (".jsonl", ".parquet"):
        raise TaskDataError(f"cannot write task rows to {path}: use a .jsonl or .parquet file name")
    encoded = encode_rows(rows)
    with atomic_path(path) as staging:
        if path.suffix == ".jsonl":
            staging.write_text("".join(json.dumps(row) + "\n" for row in encoded), encoding="utf-8")
        else:
            import datasets

            datasets.Dataset.from_list(encoded).to_parquet(str(staging))
    return path


def encode_rows(rows: Rows) -> Rows:
    """Rows whose nested, mixed-type or date-like columns are renamed `<column>__json` and hold JSON text."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    encoded = {column for column in columns if _needs_json(row.get(column) for row in rows)}
    return [{(key + JSON_SUFFIX if key in encoded else key): (json.dumps(value) if key in encoded else value)
             for key, value in row.items()} for row in rows]


def decode_rows(rows: Rows) -> Rows:
    """The inverse of `encode_rows`: `<column>__json` text decoded back into `<column>` (None stays None)."""
    return [{_decoded_name(key): _decoded_value(key, value) for key, value in row.items()} for row in rows]


def _needs_json(values: Iterable[Any]) -> bool:
    """Whether Arrow could change these values: any list or dict, scalars of more than one type, or text that
    reads as an ISO date (Arrow's JSON reader turns it into a timestamp, dropping its format and time zone)."""
    kinds = set()
    for value in values:
        if isinstance(value, list | tuple | dict) or (isinstance(value, str) and _reads_as_date(value)):
            return True
        if value is not None:
            kinds.add(type(value))
    return len(kinds) > 1


def _reads_as_date(text: str) -> bool:
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def _decoded_name(key: str) -> str:
    return key.removesuffix(JSON_SUFFIX)


def _decoded_value(key: str, value: Any) -> Any:
    if not key.endswith(JSON_SUFFIX) or value is None:
        return value
    if not isinstance(value, str):
        raise TaskDataError(f"column {key!r} must hold JSON text (the {JSON_SUFFIX!r} suffix says so), got "
                            f"{type(value).__name__}; rename the column or store its values with json.dumps")
    return json.loads(value)


def _looks_local(source: str) -> bool:
    """A path that exists, or one that names a task file (which then must exist)."""
    path = Path(source)
    return path.exists() or path.suffix in BUILDERS or source.startswith((".", "/", "~"))


def _generated_file(recipe: str, count: int | None, seed: int, cache_dir: Path, options: dict[str, Any]) -> Path:
    """The JSONL file of the recipe's `generate(count, seed, **options)`, written on first use."""
    from rollouts.registry import get_recipe

    if count is None:
        raise TaskDataError(f"generated tasks need a count (how many to generate) for recipe {recipe!r}; pass count")
    tag = f"-{hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:8]}" if options else ""
    path = cache_dir / "generated" / f"{recipe}-seed{seed}-n{count}{tag}.jsonl"
    if not path.is_file():  # generation is deterministic in (recipe, count, seed, options): a resume reads its file
        try:
            rows = get_recipe(recipe).generate(count, seed, **options)
        except TypeError as error:
            if not options:
                raise
            raise TaskDataError(f"recipe {recipe!r} does not take generator options {sorted(options)} ({error}); "
                                "remove data.generator or use a recipe that takes them (swe: levels)") from error
        write_task_rows(rows, path)
    return path


def _data_files(path: Path) -> tuple[str, list[str]]:
    """(datasets builder, files) for a task file or a directory of task files of one kind."""
    path = path.expanduser()
    if not path.exists():
        raise TaskDataError(f"task file or directory {str(path)!r} does not exist; check the path")
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in BUILDERS) if path.is_dir() else [path]
    builders = {BUILDERS.get(p.suffix) for p in files}
    if not files or None in builders:
        raise TaskDataError(f"{str(path)!r} holds no task files; give {', '.join(BUILDERS)} files or a directory "
                            f"of them")
    if len(builders) > 1:
        raise TaskDataError(f"{str(path)!r} mixes parquet and JSON task files; keep one kind per directory")
    return builders.pop(), [str(p) for p in files]


def _local_dataset(path: Path, cache_dir: Path) -> Any:
    import datasets

    builder, files = _data_files(path)
    return datasets.load_dataset(builder, data_files=files, split=DEFAULT_SPLIT,
                                 cache_dir=str(cache_dir / HF_CACHE_DIR))


def _hub_dataset(source: str, split: str | None, cache_dir: Path) -> Any:
    """Hub dataset `id` or `id:split` (the id's split wins over `split`; default "train")."""
    import datasets

    dataset_id, _, named_split = source.partition(":")
    split = named_split or split or DEFAULT_SPLIT
    try:
        return datasets.load_dataset(dataset_id, split=split, cache_dir=str(cache_dir / HF_CACHE_DIR))
    except Exception as error:  # the hub raises many kinds (connection, not found, offline mode, unknown split)
        raise TaskDataError(f"could not load hub dataset {dataset_id!r} (split {split!r}): "
                            f"{type(error).__name__}: {error}; pass a local path instead (a .parquet, .jsonl or "
                            f".json file, or a directory of them)") from error
