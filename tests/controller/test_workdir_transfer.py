"""Packing and unpacking working directories: roundtrips, and refusal of archives that would escape the target."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.workdir_transfer import UnsafeArchiveError, pack_workdir, replace_with_archive, unpack_archive

SEGMENT = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,11}", fullmatch=True).filter(lambda s: s not in (".", ".."))
TREE = st.dictionaries(st.lists(SEGMENT, min_size=1, max_size=3).map(tuple), st.binary(max_size=200), max_size=8)


def files_of(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def archive(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


def test_roundtrip_keeps_files_dirs_symlinks_and_modes(tmp_path):
    source = tmp_path / "src"
    (source / "repo" / "pkg").mkdir(parents=True)
    (source / "task.json").write_text('{"id": 1}')
    (source / "repo" / "pkg" / "mod.py").write_bytes(b"\x00\xffbinary")
    (source / "repo" / "run.sh").write_text("#!/bin/sh\n")
    (source / "repo" / "run.sh").chmod(0o755)
    (source / "empty").mkdir()
    (source / "repo" / "link").symlink_to("pkg/mod.py")
    target = tmp_path / "dst"
    names = unpack_archive(pack_workdir(source), target)
    assert "task.json" in names and "repo/link" in names
    assert files_of(target) == files_of(source)
    assert (target / "empty").is_dir() and (target / "repo" / "link").readlink() == Path("pkg/mod.py")
    assert (target / "repo" / "run.sh").stat().st_mode & 0o111


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=TREE)
def test_roundtrip_property(tmp_path_factory, tree):
    source, target = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dst")
    written: dict[str, bytes] = {}
    for parts, data in tree.items():
        path = source.joinpath(*parts)
        if any(p.is_file() for p in path.parents) or path.is_dir():
            continue  # a prefix of another path is already a file (or this one a directory)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written["/".join(parts)] = data
    unpack_archive(pack_workdir(source), target)
    assert files_of(target) == written


@pytest.mark.parametrize(("bad", "message"), [
    (member("/etc/passwd"), "absolute"),
    (member("../escape.txt"), "climbs out"),
    (member("a/../../escape.txt"), "climbs out"),
    (member("up", tarfile.SYMTYPE, "../.."), "points outside"),
    (member("abs", tarfile.SYMTYPE, "/etc"), "points outside"),
    (member("hard", tarfile.LNKTYPE, "task.json"), "hard link"),
    (member("dev", tarfile.CHRTYPE), "device"),
    (member("fifo", tarfile.FIFOTYPE), "FIFO"),
])
def test_unsafe_members_are_refused_and_nothing_is_written(tmp_path, bad, message):
    data = archive((member("task.json"), b"{}"), (bad, b"x" if bad.isfile() else None))
    target = tmp_path / "dst"
    with pytest.raises(UnsafeArchiveError, match=message) as refused:
        unpack_archive(data, target)
    assert repr(bad.name) in str(refused.value)
    assert list(target.iterdir()) == []
    assert not (tmp_path / "escape.txt").exists()


def test_size_limit_and_garbage_are_refused(tmp_path):
    data = archive((member("big.bin"), b"x" * 1000))
    with pytest.raises(UnsafeArchiveError, match="over the limit of 999"):
        unpack_archive(data, tmp_path / "a", max_bytes=999)
    with pytest.raises(UnsafeArchiveError, match="not a readable tar.gz"):
        unpack_archive(b"this is not gzip", tmp_path / "b")


def test_replace_with_archive_swaps_the_tree_and_leaves_it_alone_when_refused(tmp_path):
    workdir = tmp_path / "w"
    workdir.mkdir()
    (workdir / "prepared.txt").write_text("before")
    with pytest.raises(UnsafeArchiveError):
        replace_with_archive(archive((member("../x"), b"x")), workdir)
    assert files_of(workdir) == {"prepared.txt": b"before"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w"]
    replace_with_archive(archive((member("answer.txt"), b"42")), workdir)
    assert files_of(workdir) == {"answer.txt": b"42"}


def test_pack_refuses_a_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a directory"):
        pack_workdir(tmp_path / "missing")


def test_an_archive_past_the_graders_member_cap_is_refused_before_anything_is_written(tmp_path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for index in range(11):
            archive.addfile(tarfile.TarInfo(f"f{index}"), io.BytesIO(b""))
    assert len(unpack_archive(buffer.getvalue(), tmp_path / "ok", max_members=11)) == 11
    with pytest.raises(UnsafeArchiveError, match="more than 10 members"):
        unpack_archive(buffer.getvalue(), tmp_path / "over", max_members=10)
    assert not any((tmp_path / "over").iterdir())
