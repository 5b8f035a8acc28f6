"""The S3-protocol checkpoint store (MinIO, AWS S3, any S3 endpoint) through the official `minio` client.

A checkpoint is the objects `PREFIX/RUN/step-NNNNNN/<relative path>`, uploaded with `fput_object` (the client
switches to multipart above its 5 MiB part size). The meta file is uploaded last and marks the checkpoint complete;
the small object `PREFIX/RUN/latest` (the step directory name) is written after it, so a half-uploaded checkpoint
is never listed nor latest. URIs are `s3://BUCKET/PREFIX/RUN/step-NNNNNN`. Downloads stage and rename like the local
store's (`download_into`), and reuse a folder that already holds the same checkpoint.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from minio import Minio
from minio.deleteobjects import DeleteObject
from minio.error import S3Error

from storage.checkpoint_store_local import ProgressFn, checkpoint_files, download_into
from storage.checkpoint_uris import (
    CheckpointNotFoundError,
    check_run_id,
    parse_checkpoint_uri,
    step_dir_name,
    step_of,
)
from trainer.checkpoints import LATEST_FILE, META_FILE, CheckpointError


class S3CheckpointStore:
    """Checkpoints in bucket `bucket` under key prefix `prefix` of the S3 endpoint `endpoint` (`host:port`)."""

    def __init__(
        self, endpoint: str, access_key: str, secret_key: str, bucket: str, prefix: str = "", secure: bool = True
    ) -> None:
        root = parse_checkpoint_uri(f"s3://{bucket}/{prefix}")
        self.bucket = root.bucket
        self.prefix = root.path
        self._client = Minio(endpoint, access_key=access_key, secret_key=secret_key, secure=secure)
        self._bucket_checked = False

    def upload(self, local_dir: Path, run_id: str, step: int, progress: ProgressFn | None = None) -> str:
        """Uploads checkpoint `local_dir` as `RUN/step-NNNNNN`, meta file last, then moves `latest`; returns its URI."""
        files = checkpoint_files(Path(local_dir))
        step_key = self._key(check_run_id(run_id), step_dir_name(step))
        self._ensure_bucket()
        if self._exists(f"{step_key}/{META_FILE}"):
            raise CheckpointError(f"{self._uri(step_key)} already exists; upload under another step or run id")
        self._remove_prefix(step_key)  # objects of an interrupted upload
        try:
            for name in files:
                path = Path(local_dir) / name
                self._client.fput_object(self.bucket, f"{step_key}/{name}", str(path))
                if progress is not None:
                    progress(name, path.stat().st_size)
        except BaseException:
            with contextlib.suppress(Exception):
                self._remove_prefix(step_key)
            raise
        pointer = step_dir_name(step).encode()
        self._client.put_object(self.bucket, self._key(run_id, LATEST_FILE), io.BytesIO(pointer), len(pointer))
        return self._uri(step_key)

    def download(self, uri: str, local_dir: Path) -> Path:
        """Downloads the checkpoint at `uri` to `local_dir/step-NNNNNN` (atomically) and returns that path; a complete
        copy of the same checkpoint already there is returned as it is (see `download_into`)."""
        parsed = parse_checkpoint_uri(uri)
        if parsed.scheme != "s3" or parsed.bucket != self.bucket:
            raise CheckpointError(f"{uri!r} is not in s3://{self.bucket}; download it with a store for its bucket")
        names = self._relative_names(parsed.path)
        if META_FILE not in names:
            raise CheckpointNotFoundError(f"no complete checkpoint at {uri!r}; list(run_id) shows the available ones")

        def fill(staging: Path) -> None:
            for name in names:
                self._client.fget_object(self.bucket, f"{parsed.path}/{name}", str(staging / name))

        final = Path(local_dir) / parsed.path.rsplit("/", 1)[-1]
        return download_into(final, names, self._read(f"{parsed.path}/{META_FILE}"), fill)

    def latest(self, run_id: str) -> str | None:
        """The URI of the run's newest uploaded checkpoint, or None before its first upload."""
        key = self._key(check_run_id(run_id), LATEST_FILE)
        try:
            name = self._read(key).decode().strip()
        except S3Error as error:
            if error.code in ("NoSuchKey", "NoSuchBucket"):
                return None
            raise
        step_key = self._key(run_id, name)
        if step_of(name) is None or not self._exists(f"{step_key}/{META_FILE}"):
            raise CheckpointError(
                f"s3://{self.bucket}/{key} names {name!r}, not a complete checkpoint; fix or remove it"
            )
        return self._uri(step_key)

    def list(self, run_id: str) -> list[str]:
        """The URIs of the run's complete checkpoints (meta file uploaded), oldest step first."""
        run_key = self._key(check_run_id(run_id))
        steps = []
        for name in self._relative_names(run_key):
            step_name, _, rest = name.partition("/")
            if rest == META_FILE and (step := step_of(step_name)) is not None:
                steps.append((step, self._uri(f"{run_key}/{step_name}")))
        return [uri for _, uri in sorted(steps)]

    def _key(self, *parts: str) -> str:
        return "/".join(part for part in (self.prefix, *parts) if part)

    def _uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def _ensure_bucket(self) -> None:
        if not self._bucket_checked:
            if not self._client.bucket_exists(self.bucket):
                self._client.make_bucket(self.bucket)
            self._bucket_checked = True

    def _read(self, key: str) -> bytes:
        response = self._client.get_object(self.bucket, key)
        try:
            return response.read()
        finally:
            response.close()
            response.release_conn()

    def _exists(self, key: str) -> bool:
        try:
            self._client.stat_object(self.bucket, key)
        except S3Error as error:
            if error.code in ("NoSuchKey", "NoSuchBucket", "ResourceNotFound"):
                return False
            raise
        return True

    def _relative_names(self, key_prefix: str) -> list[str]:
        """The keys under `key_prefix/`, relative to it; empty when the bucket does not exist."""
        try:
            objects = list(self._client.list_objects(self.bucket, prefix=f"{key_prefix}/", recursive=True))
        except S3Error as error:
            if error.code == "NoSuchBucket":
                return []
            raise
        return sorted(obj.object_name[len(key_prefix) + 1 :] for obj in objects)

    def _remove_prefix(self, key_prefix: str) -> None:
        doomed = [DeleteObject(f"{key_prefix}/{name}") for name in self._relative_names(key_prefix)]
        for error in self._client.remove_objects(self.bucket, doomed):
            raise CheckpointError(f"could not remove {error.name} from s3://{self.bucket}: {error.message}")
