"""Names in a directory store: store URIs (`file:///abs/dir`, `s3://bucket/prefix`) and keys (`name/version`).

A URI names a store root or one folder in it: `file:///abs/root/KEY` in a local store, `s3://bucket/prefix/KEY` in an
S3-protocol store. These are the strings MLflow logs and a resumed run downloads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote, unquote, urlsplit

from storage.errors import StoreError

KEY_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
"""One segment of a key: 1-128 letters, digits, '.', '_', '-', starting with a letter or digit (no '..', no '/')."""
BUCKET_PATTERN = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
"""S3 bucket names: 3 to 63 lowercase letters, digits, dots and hyphens."""


@dataclass(frozen=True)
class StoreUri:
    """A parsed store URI (a root or a folder)."""

    scheme: Literal["file", "s3"]
    """`file` for a local directory, `s3` for objects in an S3-protocol store."""
    bucket: str
    """The S3 bucket; empty for `file`."""
    path: str
    """The absolute directory for `file`; the object key prefix (no leading or trailing slash) for `s3`."""

    def __str__(self) -> str:
        if self.scheme == "file":
            return "file://" + quote(self.path)
        return f"s3://{self.bucket}/{self.path}" if self.path else f"s3://{self.bucket}"


def parse_uri(uri: str) -> StoreUri:
    """Splits `file:///abs/dir` or `s3://bucket/key` into its parts; refuses anything else with the fix."""
    parts = urlsplit(uri)
    if parts.query or parts.fragment:
        raise StoreError(f"store URI {uri!r} has a query or fragment; remove the '?…' or '#…' part")
    if parts.scheme == "file":
        path = unquote(parts.path)
        if parts.netloc not in ("", "localhost") or not path.startswith("/"):
            raise StoreError(f"store URI {uri!r} is not a local absolute path; write it as file:///absolute/dir "
                             "(three slashes), e.g. Path(dir).resolve().as_uri()")
        return StoreUri("file", "", path.rstrip("/") or "/")
    if parts.scheme == "s3":
        if not BUCKET_PATTERN.match(parts.netloc):
            raise StoreError(f"store URI {uri!r} has bucket {parts.netloc!r}, not a valid S3 bucket name; "
                             "use 3-63 lowercase letters, digits, dots or hyphens, as in s3://checkpoints/prefix")
        return StoreUri("s3", parts.netloc, parts.path.strip("/"))
    raise StoreError(f"store URI {uri!r} has scheme {parts.scheme!r}; use file:///absolute/dir or s3://bucket/prefix")


def check_key(key: str) -> str:
    """`key` when every `/`-separated segment is a safe name, else raises naming the fix."""
    if not key or not all(KEY_SEGMENT.match(part) for part in key.split("/")):
        raise StoreError(f"key {key!r} is not usable; use '/'-separated segments of letters, digits, '.', '_' or "
                         "'-' (no empty or '..' segments), e.g. 'swe-smith/3f2a9c' or 'RUN/step-000042'")
    return key
