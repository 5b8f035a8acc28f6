"""A small generic directory store beside the checkpoint store: put a folder of files under a key, get it back.

For artifacts that are not checkpoints (versioned data splits): `put_dir(local_dir, key, marker)` copies every file of
`local_dir` to `ROOT/KEY/`, the `marker` file last, so a folder whose marker is present is complete. Roots and URIs
follow the checkpoint store: `file:///abs/root` (a local directory) or `s3://bucket/prefix` (MinIO, S3, moto) with an
`S3Endpoint`. `get_dir(uri, local_dir)` fills a hidden staging folder, writes SOURCE_FILE (the URI and each file's
size) last and renames it to `local_dir`; a later `get_dir` of the same URI into that folder returns it as it is.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from minio import Minio
from minio.error import S3Error

from storage.checkpoint_store import S3Endpoint
from storage.checkpoint_store_local import copy_files, files_last
from storage.checkpoint_uris import CheckpointError, parse_checkpoint_uri
from storage.files import fsync_dir, write_atomic

KEY_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
"""One segment of a key: letters, digits, '.', '_', '-' (no '..', no slashes)."""
SOURCE_FILE = ".object-store-source.json"
"""Written last into each folder `get_dir` makes: `{"uri": ..., "files": {relative path: size in bytes}}`."""


class ObjectStoreError(CheckpointError):
    """A store operation that cannot be done; the message names the key or URI and the fix."""


class DirectoryStore(Protocol):
    """Folders of files under keys (`name/version`)."""

    def put_dir(self, local_dir: Path, key: str, marker: str) -> str:
        """Uploads every file of `local_dir` to KEY (file `marker` last); returns the folder's URI."""
        ...

    def complete(self, key: str, marker: str) -> bool:
        """Whether KEY holds a folder whose `marker` file was uploaded."""
        ...

    def uri(self, key: str) -> str:
        """The URI of the folder under KEY."""
        ...

    def get_dir(self, uri: str, local_dir: Path) -> Path:
        """Downloads the folder at `uri` into the new or empty directory `local_dir` and returns it; a complete copy
        of the same `uri` that an earlier `get_dir` left there is returned without downloading again."""
        ...


def check_key(key: str) -> str:
    """`key` when every `/`-separated segment is a safe name, else raises naming the fix."""
    if not key or not all(KEY_SEGMENT.match(part) for part in key.split("/")):
        raise ObjectStoreError(f"key {key!r} is not usable; use '/'-separated segments of letters, digits, '.', "
                               "'_' or '-' (no empty or '..' segments), e.g. 'swe-smith/3f2a9c'")
    return key


def local_files(local_dir: Path, marker: str) -> list[str]:
    """The relative paths of `local_dir`'s files but SOURCE_FILE, sorted, `marker` last; raises when `marker` is
    missing."""
    if not (local_dir / marker).is_file():
        raise ObjectStoreError(f"{local_dir} has no {marker}; write it before uploading the folder")
    return [name for name in files_last(local_dir, marker) if name != SOURCE_FILE]


class LocalDirectoryStore:
    """Folders under a local directory; URIs are `file:///ROOT/KEY`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()

    def put_dir(self, local_dir: Path, key: str, marker: str) -> str:
        """Copies `local_dir` to ROOT/KEY atomically (staging directory, then a rename)."""
        final = self.root / check_key(key)
        files = local_files(Path(local_dir), marker)
        if (final / marker).is_file():
            raise ObjectStoreError(f"{final} already exists; upload under another key")
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
        try:
            copy_files(Path(local_dir), files, staging)
            shutil.rmtree(final, ignore_errors=True)  # without its marker it is debris of an interrupted upload
            os.rename(staging, final)
            fsync_dir(final.parent)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return final.as_uri()

    def complete(self, key: str, marker: str) -> bool:
        """Whether ROOT/KEY/marker exists."""
        return (self.root / check_key(key) / marker).is_file()

    def uri(self, key: str) -> str:
        """`file:///ROOT/KEY`."""
        return (self.root / check_key(key)).as_uri()

    def get_dir(self, uri: str, local_dir: Path) -> Path:
        """Copies the folder at the `file://` `uri` into `local_dir` (reused when it already holds that copy)."""
        parsed = parse_checkpoint_uri(uri)
        if parsed.scheme != "file" or not Path(parsed.path).is_dir():
            raise ObjectStoreError(f"no folder at {uri!r}; pass a file:// URI that put_dir returned")
        source = Path(parsed.path)
        files = files_last(source)
        return _get_into(Path(local_dir), uri, lambda staging: copy_files(source, files, staging))


class S3DirectoryStore:
    """Folders as objects `PREFIX/KEY/<file>` in one bucket; URIs are `s3://BUCKET/PREFIX/KEY`."""

    def __init__(self, endpoint: S3Endpoint, bucket: str, prefix: str = "") -> None:
        root = parse_checkpoint_uri(f"s3://{bucket}/{prefix}")
        self.bucket, self.prefix = root.bucket, root.path
        self._client = Minio(endpoint.endpoint, access_key=endpoint.access_key, secret_key=endpoint.secret_key,
                             secure=endpoint.secure)

    def _key(self, key: str) -> str:
        return "/".join(part for part in (self.prefix, check_key(key)) if part)

    def put_dir(self, local_dir: Path, key: str, marker: str) -> str:
        """Uploads each file as an object, `marker` last (the bucket is created when missing)."""
        check_key(key)
        files = local_files(Path(local_dir), marker)
        if not self._client.bucket_exists(self.bucket):
            self._client.make_bucket(self.bucket)
        if self.complete(key, marker):
            raise ObjectStoreError(f"s3://{self.bucket}/{self._key(key)} already exists; upload under another key")
        for name in files:
            self._client.fput_object(self.bucket, f"{self._key(key)}/{name}", str(Path(local_dir) / name))
        return self.uri(key)

    def uri(self, key: str) -> str:
        """`s3://BUCKET/PREFIX/KEY`."""
        return f"s3://{self.bucket}/{self._key(key)}"

    def complete(self, key: str, marker: str) -> bool:
        """Whether the marker object of KEY exists."""
        try:
            self._client.stat_object(self.bucket, f"{self._key(key)}/{marker}")
        except S3Error as error:
            if error.code in ("NoSuchKey", "NoSuchBucket", "ResourceNotFound"):
                return False
            raise
        return True

    def get_dir(self, uri: str, local_dir: Path) -> Path:
        """Downloads every object under the `s3://` `uri` into `local_dir` (reused when it already holds that copy)."""
        parsed = parse_checkpoint_uri(uri)
        if parsed.scheme != "s3" or parsed.bucket != self.bucket:
            raise ObjectStoreError(f"{uri!r} is not in s3://{self.bucket}; use a store for its bucket")
        if _holds_copy(Path(local_dir), uri):
            return Path(local_dir)
        try:
            objects = list(self._client.list_objects(self.bucket, prefix=f"{parsed.path}/", recursive=True))
        except S3Error as error:
            raise ObjectStoreError(f"cannot list {uri!r}: {error.code}; check the bucket and the URI") from error
        if not objects:
            raise ObjectStoreError(f"no folder at {uri!r}; pass a URI that put_dir returned")

        def download(staging: Path) -> None:
            for obj in objects:
                self._client.fget_object(self.bucket, obj.object_name,
                                         str(staging / obj.object_name[len(parsed.path) + 1:]))

        return _get_into(Path(local_dir), uri, download)


def directory_store_from_uri(root_uri: str, s3: S3Endpoint | None = None) -> DirectoryStore:
    """The store rooted at `file:///dir` or `s3://bucket/prefix` (the latter needs `s3`)."""
    root = parse_checkpoint_uri(root_uri)
    if root.scheme == "file":
        return LocalDirectoryStore(Path(root.path))
    if s3 is None:
        raise ObjectStoreError(f"store {root_uri!r} is on S3 but no endpoint is given; pass "
                               "S3Endpoint(endpoint='host:port', access_key=..., secret_key=...)")
    return S3DirectoryStore(s3, root.bucket, root.path)


def _get_into(local_dir: Path, uri: str, fill: Callable[[Path], None]) -> Path:
    """`local_dir` filled by `fill(staging)` plus SOURCE_FILE, renamed into place; reused when it holds `uri`."""
    if _holds_copy(local_dir, uri):
        return local_dir
    local_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{local_dir.name}.tmp-", dir=local_dir.parent))
    try:
        fill(staging)
        files = {name: (staging / name).stat().st_size for name in files_last(staging)}
        record = json.dumps({"uri": str(parse_checkpoint_uri(uri)), "files": files}, indent=2, sort_keys=True)
        write_atomic(staging / SOURCE_FILE, record + "\n")  # fsynced, last: the copy is complete
        if local_dir.exists():
            local_dir.rmdir()  # empty, checked by _holds_copy
        os.rename(staging, local_dir)
        fsync_dir(local_dir.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return local_dir


def _holds_copy(local_dir: Path, uri: str) -> bool:
    """Whether `local_dir` is a complete copy of `uri` that `get_dir` made; False when it is missing or empty, raises
    naming the fix when it holds anything else."""
    if not local_dir.exists() or (local_dir.is_dir() and not any(local_dir.iterdir())):
        return False
    record = _read_record(local_dir / SOURCE_FILE)
    if record is None:
        problem = f"has no readable {SOURCE_FILE}, so no get_dir made it"
    elif record["uri"] != str(parse_checkpoint_uri(uri)):
        problem = f"holds a copy of {record['uri']!r}"
    elif changed := [name for name, size_bytes in record["files"].items()
                     if not (local_dir / name).is_file() or (local_dir / name).stat().st_size != size_bytes]:
        problem = f"lacks or changed {len(changed)} of its files, e.g. {changed[0]}"
    else:
        return True
    raise ObjectStoreError(f"{local_dir} is not empty and {problem}, not a complete copy of {uri!r}; remove it or "
                           "download into a new or empty directory")


def _read_record(path: Path) -> dict | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("uri"), str) or not isinstance(
            record.get("files"), dict):
        return None
    return record
