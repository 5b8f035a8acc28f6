"""The local directory store: folders under `ROOT/KEY/`, URIs `file:///ROOT/KEY`, the embedded default.

A put copies into a hidden staging sibling, fsyncs it and renames it into place, so a folder under a key is always
whole; small files (pointers) are replaced atomically.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from storage.errors import NotFoundError, StoreError
from storage.files import write_atomic
from storage.staging import ProgressFn, copy_files, folder_files, get_into, place
from storage.uris import KEY_SEGMENT, check_key, parse_uri


class LocalStore:
    """Folders under the local directory `root`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()

    def put_dir(self, local_dir: Path, key: str, marker: str, progress: ProgressFn | None = None) -> str:
        """Copies `local_dir` to ROOT/KEY atomically (`marker` last); debris of an interrupted put is replaced."""
        final = self.root / check_key(key)
        files = folder_files(Path(local_dir), marker)
        if (final / marker).is_file():
            raise StoreError(f"{final.as_uri()} already exists; upload under another key")
        place(final, lambda staging: copy_files(Path(local_dir), files, staging, progress))
        return final.as_uri()

    def get_dir(self, uri: str, local_dir: Path, marker: str) -> Path:
        """Copies the complete folder at the `file://` `uri` into `local_dir` (reused when it holds that copy)."""
        parsed = parse_uri(uri)
        if parsed.scheme != "file":
            raise StoreError(f"{uri!r} is not a file:// URI; download it with the store for its scheme")
        source = Path(parsed.path)
        if not (source / marker).is_file():
            raise NotFoundError(f"no complete folder at {uri!r} (no {marker}); list the complete ones to pick one")
        files = folder_files(source, marker)
        sizes = {name: (source / name).stat().st_size for name in files}
        return get_into(Path(local_dir), uri, sizes, marker, (source / marker).read_bytes(),
                        lambda staging: copy_files(source, files, staging))

    def complete(self, key: str, marker: str) -> bool:
        """Whether ROOT/KEY/marker exists."""
        return (self.root / check_key(key) / marker).is_file()

    def complete_keys(self, prefix: str, marker: str) -> list[str]:
        """The complete keys one level under `prefix`, sorted."""
        folder = self.root / check_key(prefix)
        if not folder.is_dir():
            return []
        return sorted(f"{prefix}/{path.name}" for path in folder.iterdir()
                      if KEY_SEGMENT.match(path.name) and (path / marker).is_file())

    def uri(self, key: str) -> str:
        """`file:///ROOT/KEY`."""
        return (self.root / check_key(key)).as_uri()

    def put_text(self, key: str, text: str) -> None:
        """Replaces the file ROOT/KEY with `text`, atomically and durably."""
        write_atomic(self.root / check_key(key), text)

    def get_text(self, key: str) -> str | None:
        """The text of the file ROOT/KEY, or None when there is none."""
        path = self.root / check_key(key)
        return path.read_text(encoding="utf-8") if path.is_file() else None

    def delete(self, key: str) -> None:
        """Removes the folder ROOT/KEY and everything in it."""
        shutil.rmtree(self.root / check_key(key), ignore_errors=True)
