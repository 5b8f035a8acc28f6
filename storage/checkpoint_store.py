"""Where checkpoints live beyond the trainer's disk: the `CheckpointStore` protocol and its construction.

`LocalCheckpointStore` (a directory, the embedded default) and `S3CheckpointStore` (MinIO or any S3 endpoint)
implement it. Both hand out checkpoint URIs (`file://…`, `s3://…`), which MLflow logs and a resumed run downloads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from storage.checkpoint_store_local import LocalCheckpointStore, ProgressFn
from storage.checkpoint_store_s3 import S3CheckpointStore
from storage.checkpoint_uris import CheckpointNotFoundError, CheckpointUri, parse_checkpoint_uri
from trainer.checkpoints import CheckpointError

__all__ = [
    "CheckpointError",
    "CheckpointNotFoundError",
    "CheckpointStore",
    "CheckpointStoreConfig",
    "CheckpointUri",
    "LocalCheckpointStore",
    "S3CheckpointStore",
    "S3Endpoint",
    "parse_checkpoint_uri",
    "store_from_config",
    "store_from_uri",
]


class CheckpointStore(Protocol):
    """Uploads checkpoint directories per run and step, and finds them again by URI."""

    def upload(self, local_dir: Path, run_id: str, step: int, progress: ProgressFn | None = None) -> str:
        """Stores checkpoint `local_dir` as the run's `step`, then makes it the run's latest; returns its URI."""
        ...

    def download(self, uri: str, local_dir: Path) -> Path:
        """Copies the checkpoint at `uri` to `local_dir/step-NNNNNN` and returns that path; a complete copy of the same
        checkpoint already there is returned without copying again, anything else there is refused."""
        ...

    def latest(self, run_id: str) -> str | None:
        """The URI of the run's last fully uploaded checkpoint, or None."""
        ...

    def list(self, run_id: str) -> list[str]:
        """The URIs of the run's complete checkpoints, oldest step first."""
        ...


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
            raise CheckpointError(
                f"S3 endpoint {self.endpoint!r} must be 'host:port' without scheme or path; "
                "e.g. endpoint='minio:9000' with secure=False for http://minio:9000"
            )


@dataclass(frozen=True)
class CheckpointStoreConfig:
    """Which checkpoint store a run uses."""

    root_uri: str
    """`file:///absolute/dir` for a local store, `s3://bucket/prefix` for an S3-protocol store."""
    s3: S3Endpoint | None = None
    """The S3 server for an `s3://` root; must be None for a `file://` root."""

    def __post_init__(self) -> None:
        scheme = parse_checkpoint_uri(self.root_uri).scheme
        if scheme == "s3" and self.s3 is None:
            raise CheckpointError(
                f"checkpoint store {self.root_uri!r} is on S3 but no endpoint is configured; "
                "pass s3=S3Endpoint(endpoint='host:port', access_key=..., secret_key=...)"
            )
        if scheme == "file" and self.s3 is not None:
            raise CheckpointError(
                f"checkpoint store {self.root_uri!r} is a local directory but an S3 endpoint is configured; "
                "use an s3://bucket/prefix root or drop the endpoint"
            )


def store_from_config(config: CheckpointStoreConfig) -> CheckpointStore:
    """The store `config` describes (S3 buckets are created on the first upload)."""
    root = parse_checkpoint_uri(config.root_uri)
    if root.scheme == "file":
        return LocalCheckpointStore(Path(root.path))
    assert config.s3 is not None  # checked by CheckpointStoreConfig
    return S3CheckpointStore(
        config.s3.endpoint,
        config.s3.access_key,
        config.s3.secret_key,
        bucket=root.bucket,
        prefix=root.path,
        secure=config.s3.secure,
    )


def store_from_uri(root_uri: str, s3: S3Endpoint | None = None) -> CheckpointStore:
    """The store rooted at `root_uri` (`file:///dir` or `s3://bucket/prefix`, the latter with `s3`)."""
    return store_from_config(CheckpointStoreConfig(root_uri, s3))
