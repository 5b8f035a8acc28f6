"""The directory store: folders of files under keys (`RUN/step-000042`, `swe-smith/3f2a9c`) in a local directory or
an S3-protocol bucket, named by `file://` and `s3://` URIs.

A folder is put atomically: its `marker` file is stored last, so a key whose marker is present is complete (and
listed), anything else under it is debris of an interrupted put. Getting a folder fills a hidden staging sibling and
renames it into place; a complete copy of the same folder already there (the same marker bytes, every file at its
size) is reused, anything else there is refused naming the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from storage.errors import StoreError
from storage.local_store import LocalStore
from storage.s3_store import S3Endpoint, S3Store
from storage.staging import ProgressFn
from storage.uris import parse_uri


class DirectoryStore(Protocol):
    """Folders of files under keys, each complete once its marker file is in."""

    def put_dir(self, local_dir: Path, key: str, marker: str, progress: ProgressFn | None = None) -> str:
        """Stores every file of `local_dir` under KEY, `marker` last, and returns the folder's URI; refuses a KEY
        that is already complete."""
        ...

    def get_dir(self, uri: str, local_dir: Path, marker: str) -> Path:
        """Copies the complete folder at `uri` into the new or empty directory `local_dir` and returns it; a complete
        copy of it already there is returned as it is, anything else there is refused."""
        ...

    def complete(self, key: str, marker: str) -> bool:
        """Whether KEY holds a folder whose `marker` file is in."""
        ...

    def complete_keys(self, prefix: str, marker: str) -> list[str]:
        """The complete keys one level under `prefix`, sorted."""
        ...

    def uri(self, key: str) -> str:
        """The URI of KEY."""
        ...

    def put_text(self, key: str, text: str) -> None:
        """Replaces the small file KEY (a pointer such as `RUN/latest`) with `text`, whole."""
        ...

    def get_text(self, key: str) -> str | None:
        """The text of the small file KEY, or None when there is none."""
        ...

    def delete(self, key: str) -> None:
        """Removes the folder under KEY and everything in it (nothing when there is none)."""
        ...


def directory_store(root_uri: str, s3: S3Endpoint | None = None) -> DirectoryStore:
    """The store rooted at `file:///dir` or at `s3://bucket/prefix` on the server `s3` (the bucket is made on the first
    put)."""
    root = parse_uri(root_uri)
    if root.scheme == "file":
        if s3 is not None:
            raise StoreError(f"store {root_uri!r} is a local directory but an S3 endpoint is configured; "
                             "use an s3://bucket/prefix root or drop the endpoint")
        return LocalStore(Path(root.path))
    if s3 is None:
        raise StoreError(f"store {root_uri!r} is on S3 but no endpoint is configured; "
                         "pass s3=S3Endpoint(endpoint='host:port', access_key=..., secret_key=...)")
    return S3Store(s3, root.bucket, root.path)
