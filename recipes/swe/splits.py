"""Versioned SWE data splits: `train.jsonl`, `val.jsonl` and `manifest.json` in one folder, named by their content.

The version is a hash of the two files and of the manifest's recipe (seed, k, sizes, sources, step counts, params;
not `created_at`): the same data prepared twice gets the same version, any change a new one. A published split lives
under `<name>/<version>/` of a directory store (`storage.directory_store`: a local folder or an S3 bucket); the
manifest is its marker, uploaded last, so a folder with a manifest is complete.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from storage.directory_store import DirectoryStore

TRAIN_FILE = "train.jsonl"
VAL_FILE = "val.jsonl"
MANIFEST_FILE = "manifest.json"
VERSION_CHARS = 16  # hex digits of the content hash kept as the version

Row = dict[str, Any]


class SplitManifest(BaseModel):
    """What a split folder holds and how it was made."""

    name: str = Field(description="the split family, e.g. 'swe-smith' (the folder above the version)")
    version: str = Field(description=f"the first {VERSION_CHARS} hex digits of the content hash")
    created_at: str = Field(description="when it was written (ISO 8601, UTC); not part of the version")
    seed: int = Field(description="the seed of every draw")
    k: int = Field(description="probe rollouts per task of the difficulty filter")
    sizes: dict[str, int] = Field(description="the sizes asked for: n_mixed, n_unsolved, n_heldout")
    sources: list[str] = Field(description="where the rows came from (dataset ids or paths)")
    steps: dict[str, dict[str, int]] = Field(description="each pipeline step's counts (in, kept, dropped), in order")
    difficulty: dict[str, int] = Field(description="the difficulty filter's class and split counts")
    n_train: int = Field(description="rows in train.jsonl")
    n_val: int = Field(description="rows in val.jsonl")
    files: dict[str, str] = Field(description="sha256 of each data file, by file name")
    params: dict[str, Any] = Field(default_factory=dict, description="anything else that shaped the data "
                                   "(model, checkpoint, pass threshold, max tests)")


@dataclass(frozen=True)
class Splits:
    """A split read back: the rows and their manifest."""

    train: list[Row]  # training rows, in file order
    val: list[Row]  # held-out rows, in file order
    manifest: SplitManifest  # how they were made


class SplitError(ValueError):
    """A split folder that is incomplete or altered; the message names the file and the fix."""


def jsonl_bytes(rows: Sequence[Row]) -> bytes:
    """Rows as canonical JSONL (sorted keys): equal rows give equal bytes."""
    return "".join(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n" for row in rows).encode("utf-8")


def content_version(files: Mapping[str, bytes], recipe: Mapping[str, Any]) -> str:
    """The hash of the files (by name) and of the canonical JSON of `recipe`."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(f"{name}\n{hashlib.sha256(files[name]).hexdigest()}\n".encode())
    digest.update(json.dumps(recipe, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:VERSION_CHARS]


def write_splits(directory: Path, train: Sequence[Row], val: Sequence[Row], *, name: str, seed: int, k: int,
                 sizes: Mapping[str, int], sources: Sequence[str], steps: Mapping[str, Mapping[str, int]],
                 difficulty: Mapping[str, int], params: Mapping[str, Any] | None = None) -> tuple[Path, SplitManifest]:
    """Writes `directory/<version>/` with the two JSONL files and the manifest; returns the folder and manifest."""
    overlap = {r["instance_id"] for r in train} & {r["instance_id"] for r in val}
    if overlap:
        raise SplitError(f"{len(overlap)} instance(s) are in both train and val, e.g. {sorted(overlap)[:5]}; "
                         "the held-out split must be disjoint from training")
    files = {TRAIN_FILE: jsonl_bytes(train), VAL_FILE: jsonl_bytes(val)}
    recipe = {"name": name, "seed": seed, "k": k, "sizes": dict(sizes), "sources": list(sources),
              "steps": {step: dict(counts) for step, counts in steps.items()}, "difficulty": dict(difficulty),
              "params": dict(params or {})}
    version = content_version(files, recipe)
    manifest = SplitManifest(version=version, created_at=datetime.now(UTC).isoformat(timespec="seconds"),
                             n_train=len(train), n_val=len(val),
                             files={n: hashlib.sha256(b).hexdigest() for n, b in files.items()}, **recipe)
    folder = Path(directory) / version
    folder.mkdir(parents=True, exist_ok=True)
    for file_name, data in files.items():
        (folder / file_name).write_bytes(data)
    (folder / MANIFEST_FILE).write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return folder, manifest


def read_splits(folder: Path) -> Splits:
    """The rows and manifest of a split folder, each file checked against the manifest's hash."""
    folder = Path(folder)
    if not (folder / MANIFEST_FILE).is_file():
        raise SplitError(f"{folder} has no {MANIFEST_FILE}: not a (complete) split folder; pass a folder "
                         "write_splits or fetch_splits returned")
    manifest = SplitManifest.model_validate_json((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
    rows: dict[str, list[Row]] = {}
    for file_name in (TRAIN_FILE, VAL_FILE):
        data = (folder / file_name).read_bytes()
        if hashlib.sha256(data).hexdigest() != manifest.files.get(file_name):
            raise SplitError(f"{folder / file_name} does not match the sha256 in {MANIFEST_FILE}; the split was "
                             "altered or half copied: fetch it again")
        rows[file_name] = [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
    return Splits(rows[TRAIN_FILE], rows[VAL_FILE], manifest)


def publish_splits(folder: Path, store: DirectoryStore) -> str:
    """Uploads a split folder to `<name>/<version>` (manifest last) and returns its URI; a version already published
    completely is not uploaded again (same version, same content)."""
    manifest = read_splits(folder).manifest
    key = f"{manifest.name}/{manifest.version}"
    if store.complete(key, MANIFEST_FILE):
        return store.uri(key)
    return store.put_dir(folder, key, MANIFEST_FILE)


def split_store_root(uri: str) -> str:
    """The store root of a published split's URI (`ROOT/<name>/<version>`, as `publish_splits` returns it)."""
    parts = uri.rstrip("/").rsplit("/", 2)
    root = parts[0]
    if len(parts) != 3 or "://" not in root or not all(parts[1:]):
        raise ValueError(f"{uri!r} is not a published split's URI (ROOT/<name>/<version>, e.g. "
                         "file:///data/splits/swe-smith/v-1a2b3c or s3://bucket/splits/swe-smith/v-1a2b3c)")
    return root


def fetch_splits(store: DirectoryStore, uri: str, local_dir: Path) -> Splits:
    """Downloads the split at `uri` into the new or empty directory `local_dir` (a complete copy of it already there
    is reused) and reads it (hashes checked)."""
    return read_splits(store.get_dir(uri, Path(local_dir), MANIFEST_FILE))
