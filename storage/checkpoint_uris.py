"""Names in the checkpoint store: checkpoint URIs (`file://` and `s3://`), run ids and step directory names.

A checkpoint URI names one checkpoint directory: `file:///abs/root/RUN/step-000042` in a local store,
`s3://bucket/prefix/RUN/step-000042` in an S3-protocol store. These are the strings MLflow logs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote, unquote, urlsplit

from trainer.checkpoints import CheckpointError, checkpoint_name

STEP_PATTERN = re.compile(r"^step-(\d{6,})$")
"""A checkpoint directory name, as `trainer.checkpoints.checkpoint_name` writes it."""
RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
"""Run ids allowed as one path segment (MLflow run ids and flow run names fit)."""
BUCKET_PATTERN = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
"""S3 bucket names: 3 to 63 lowercase letters, digits, dots and hyphens."""


class CheckpointNotFoundError(CheckpointError):
    """No complete checkpoint exists at a URI."""


@dataclass(frozen=True)
class CheckpointUri:
    """A parsed checkpoint (or store root) URI."""

    scheme: Literal["file", "s3"]
    """`file` for a local directory, `s3` for an object in an S3-protocol store."""
    bucket: str
    """The S3 bucket; empty for `file`."""
    path: str
    """The absolute directory for `file`; the object key prefix (no leading or trailing slash) for `s3`."""

    def __str__(self) -> str:
        if self.scheme == "file":
            return "file://" + quote(self.path)
        return f"s3://{self.bucket}/{self.path}" if self.path else f"s3://{self.bucket}"


def parse_checkpoint_uri(uri: str) -> CheckpointUri:
    """Splits `file:///abs/dir` or `s3://bucket/key` into its parts; refuses anything else with the fix."""
    parts = urlsplit(uri)
    if parts.query or parts.fragment:
        raise CheckpointError(f"checkpoint URI {uri!r} has a query or fragment; remove the '?…' or '#…' part")
    if parts.scheme == "file":
        path = unquote(parts.path)
        if parts.netloc not in ("", "localhost") or not path.startswith("/"):
            raise CheckpointError(
                f"checkpoint URI {uri!r} is not a local absolute path; write it as file:///absolute/dir "
                "(three slashes), e.g. Path(dir).resolve().as_uri()"
            )
        return CheckpointUri("file", "", path.rstrip("/") or "/")
    if parts.scheme == "s3":
        if not BUCKET_PATTERN.match(parts.netloc):
            raise CheckpointError(
                f"checkpoint URI {uri!r} has bucket {parts.netloc!r}, not a valid S3 bucket name; "
                "use 3-63 lowercase letters, digits, dots or hyphens, as in s3://checkpoints/prefix"
            )
        return CheckpointUri("s3", parts.netloc, parts.path.strip("/"))
    raise CheckpointError(
        f"checkpoint URI {uri!r} has scheme {parts.scheme!r}; use file:///absolute/dir or s3://bucket/prefix"
    )


def check_run_id(run_id: str) -> str:
    """Returns `run_id` when it is usable as one path segment, else raises naming the fix."""
    if not RUN_ID_PATTERN.match(run_id):
        raise CheckpointError(
            f"run id {run_id!r} cannot name a checkpoint folder; use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (an MLflow run id works)"
        )
    return run_id


def step_dir_name(step: int) -> str:
    """The directory name of the checkpoint after `step` steps (`step-000042`), refusing negative steps."""
    if step < 0:
        raise CheckpointError(f"step {step} is negative; pass the number of training steps applied (>= 0)")
    return checkpoint_name(step)


def step_of(name: str) -> int | None:
    """The step of directory name `name` (`step-000042` → 42), or None when it is not a checkpoint name."""
    match = STEP_PATTERN.match(name)
    return int(match.group(1)) if match else None
