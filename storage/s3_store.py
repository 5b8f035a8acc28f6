"""The S3-protocol directory store (MinIO, AWS S3, moto, any S3 endpoint) through the official `minio` client.

A folder is the objects `PREFIX/KEY/<relative path>`, uploaded with `fput_object` (the client switches to multipart
above its 5 MiB part size), the marker last: a key whose marker object exists is complete, and objects of an
interrupted put are removed before the next one. URIs are `s3://BUCKET/PREFIX/KEY`. Gets stage and rename like the
local store's and reuse a folder that already holds the same copy.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

from minio import Minio
from minio.deleteobjects import DeleteObject
from minio.error import S3Error

from storage.errors import NotFoundError, StoreError
from storage.staging import ProgressFn, folder_files, get_into
from storage.uris import KEY_SEGMENT, check_key, parse_uri

MISSING = ("NoSuchKey", "NoSuchBucket", "ResourceNotFound")
"""S3 error codes that mean the object (or its bucket) is not there."""


@dataclass(frozen=True)
class S3Endpoint:
    """How to reach an S3-protocol server (MinIO, AWS S3, moto)."""

    endpoint: str
    """`host:port` of the S3 API, without a scheme."""
    access_key: str
    """The access key id."""
    secret_key: str
    """The secret access key."""
    secure: bool = True
    """HTTPS when True, plain HTTP when False (a local MinIO)."""

    def __post_init__(self) -> None:
        if "://" in self.endpoint or "/" in self.endpoint or not self.endpoint:
            raise StoreError(f"S3 endpoint {self.endpoint!r} must be 'host:port' without scheme or path; "
                             "e.g. endpoint='minio:9000' with secure=False for http://minio:9000")


class S3Store:
    """Folders in bucket `bucket` under key prefix `prefix` of an S3 endpoint (the bucket is made on the first put)."""

    def __init__(self, endpoint: S3Endpoint, bucket: str, prefix: str = "") -> None:
        root = parse_uri(f"s3://{bucket}/{prefix}")
        self.bucket, self.prefix = root.bucket, root.path
        self._client = Minio(endpoint.endpoint, access_key=endpoint.access_key, secret_key=endpoint.secret_key,
                             secure=endpoint.secure)
        self._bucket_checked = False

    def put_dir(self, local_dir: Path, key: str, marker: str, progress: ProgressFn | None = None) -> str:
        """Uploads each file of `local_dir` as an object under KEY, `marker` last; objects of an interrupted put are
        removed first, and on failure."""
        object_key = self._key(key)
        files = folder_files(Path(local_dir), marker)
        self._ensure_bucket()
        if self.complete(key, marker):
            raise StoreError(f"{self.uri(key)} already exists; upload under another key")
        self.delete(key)
        try:
            for name in files:
                path = Path(local_dir) / name
                self._client.fput_object(self.bucket, f"{object_key}/{name}", str(path))
                if progress is not None:
                    progress(name, path.stat().st_size)
        except BaseException:
            with contextlib.suppress(Exception):
                self.delete(key)
            raise
        return self.uri(key)

    def get_dir(self, uri: str, local_dir: Path, marker: str) -> Path:
        """Downloads the complete folder at the `s3://` `uri` into `local_dir` (reused when it holds that copy)."""
        parsed = parse_uri(uri)
        if parsed.scheme != "s3" or parsed.bucket != self.bucket:
            raise StoreError(f"{uri!r} is not in s3://{self.bucket}; download it with a store for its bucket")
        sizes = self._sizes(parsed.path)
        if marker not in sizes:
            raise NotFoundError(f"no complete folder at {uri!r} (no {marker}); list the complete ones to pick one")

        def fill(staging: Path) -> None:
            for name in sizes:
                self._client.fget_object(self.bucket, f"{parsed.path}/{name}", str(staging / name))

        return get_into(Path(local_dir), uri, sizes, marker, self._read(f"{parsed.path}/{marker}"), fill)

    def complete(self, key: str, marker: str) -> bool:
        """Whether the marker object of KEY exists."""
        try:
            self._client.stat_object(self.bucket, f"{self._key(key)}/{marker}")
        except S3Error as error:
            if error.code in MISSING:
                return False
            raise
        return True

    def complete_keys(self, prefix: str, marker: str) -> list[str]:
        """The complete keys one level under `prefix` (their marker object exists), sorted."""
        names = self._sizes(self._key(prefix))
        return sorted(f"{prefix}/{child}" for name in names
                      if (child := name.partition("/")[0]) and name == f"{child}/{marker}" and KEY_SEGMENT.match(child))

    def uri(self, key: str) -> str:
        """`s3://BUCKET/PREFIX/KEY`."""
        return f"s3://{self.bucket}/{self._key(key)}"

    def put_text(self, key: str, text: str) -> None:
        """Replaces the object KEY with `text` (S3 replaces an object whole)."""
        data = text.encode("utf-8")
        self._ensure_bucket()
        self._client.put_object(self.bucket, self._key(key), io.BytesIO(data), len(data))

    def get_text(self, key: str) -> str | None:
        """The text of the object KEY, or None when there is none."""
        try:
            return self._read(self._key(key)).decode("utf-8")
        except S3Error as error:
            if error.code in MISSING:
                return None
            raise

    def delete(self, key: str) -> None:
        """Removes every object under KEY."""
        object_key = self._key(key)
        doomed = [DeleteObject(f"{object_key}/{name}") for name in self._sizes(object_key)]
        for error in self._client.remove_objects(self.bucket, doomed):
            raise StoreError(f"could not remove {error.name} from s3://{self.bucket}: {error.message}; "
                             "check the credentials' delete permission")

    def _key(self, key: str) -> str:
        return "/".join(part for part in (self.prefix, check_key(key)) if part)

    def _ensure_bucket(self) -> None:
        if not self._bucket_checked:
            if not self._client.bucket_exists(self.bucket):
                self._client.make_bucket(self.bucket)
            self._bucket_checked = True

    def _read(self, object_key: str) -> bytes:
        response = self._client.get_object(self.bucket, object_key)
        try:
            return response.read()
        finally:
            response.close()
            response.release_conn()

    def _sizes(self, object_prefix: str) -> dict[str, int]:
        """The sizes of the objects under `object_prefix/` by name relative to it, sorted; empty without bucket."""
        try:
            objects = list(self._client.list_objects(self.bucket, prefix=f"{object_prefix}/", recursive=True))
        except S3Error as error:
            if error.code == "NoSuchBucket":
                return {}
            raise
        return dict(sorted((obj.object_name[len(object_prefix) + 1:], obj.size) for obj in objects))
