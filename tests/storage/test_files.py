"""Atomic writes: the new content replaces the file whole, a failed write leaves the old file and no debris."""

from __future__ import annotations

import pytest

from storage.files import atomic_path, write_atomic


def test_write_atomic_replaces_the_file_and_leaves_no_staging(tmp_path):
    path = tmp_path / "sub" / "state.json"
    write_atomic(path, "old ✓")
    write_atomic(path, "new ✓")
    assert path.read_text(encoding="utf-8") == "new ✓" and [p.name for p in path.parent.iterdir()] == ["state.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_staging(tmp_path):
    path = tmp_path / "rows.jsonl"
    write_atomic(path, "old\n")
    with pytest.raises(RuntimeError, match="disk full"), atomic_path(path) as staging:
        staging.write_text("half")
        raise RuntimeError("disk full")
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["rows.jsonl"]
