"""The directory store, local and on a real S3-protocol server (moto): atomic puts, reused or refused gets, keys."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from storage.directory_store import DirectoryStore, directory_store
from storage.errors import NotFoundError, StoreError
from storage.local_store import LocalStore
from storage.s3_store import S3Endpoint, S3Store
from storage.uris import StoreUri, parse_uri

MARKER = "manifest.json"


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path: Path) -> DirectoryStore:
    if request.param == "local":
        return directory_store((tmp_path / "store").as_uri())
    bucket = f"dirs-{uuid.uuid4().hex[:12]}"  # a fresh bucket per test; the store makes it on the first put
    return directory_store(f"s3://{bucket}/data/v1", request.getfixturevalue("s3_endpoint"))


def folder(path: Path, version: str = "1") -> Path:
    """A folder with a nested file, a data file and its marker."""
    (path / "sub").mkdir(parents=True)
    (path / "sub" / "rows.jsonl").write_text('{"a": 1}\n' * 3)
    (path / "train.jsonl").write_text(f"train {version} ✓\n")
    (path / MARKER).write_text(f'{{"version": "{version}"}}')
    return path


def tree(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_a_folder_round_trips_with_its_marker_last_and_is_listed_once_complete(store, tmp_path):
    source = folder(tmp_path / "source")
    seen: list[tuple[str, bool]] = []
    uri = store.put_dir(source, "splits/v-1", MARKER, progress=lambda name, size: seen.append(
        (name, store.complete("splits/v-1", MARKER))))
    assert [name for name, _ in seen] == ["sub/rows.jsonl", "train.jsonl", MARKER]
    assert not any(done for _, done in seen[:-1])  # incomplete until the marker is in
    assert uri == store.uri("splits/v-1") and uri.endswith("/splits/v-1") and parse_uri(uri).scheme in ("file", "s3")
    assert store.complete("splits/v-1", MARKER) and not store.complete("splits/v-2", MARKER)
    store.put_dir(folder(tmp_path / "other", "2"), "splits/v-0", MARKER)
    assert store.complete_keys("splits", MARKER) == ["splits/v-0", "splits/v-1"]
    assert store.complete_keys("nothing", MARKER) == []
    copy = store.get_dir(uri, tmp_path / "out" / "copy", MARKER)
    assert copy == tmp_path / "out" / "copy" and tree(copy) == tree(source)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["copy"]  # no staging left
    (tmp_path / "empty").mkdir()
    assert tree(store.get_dir(uri, tmp_path / "empty", MARKER)) == tree(source)  # an empty folder is filled


def test_a_second_get_reuses_a_complete_copy_and_anything_else_is_refused_with_the_fix(store, tmp_path):
    uri = store.put_dir(folder(tmp_path / "a"), "x/a", MARKER)
    other = store.put_dir(folder(tmp_path / "b", "2"), "x/b", MARKER)
    copy = store.get_dir(uri, tmp_path / "copy", MARKER)
    (copy / "sentinel.txt").write_text("left by the first get")
    assert store.get_dir(uri, tmp_path / "copy", MARKER) == copy
    assert (copy / "sentinel.txt").is_file()  # not downloaded again
    with pytest.raises(StoreError, match=r"copy already exists but holds another folder .*remove it or download"):
        store.get_dir(other, tmp_path / "copy", MARKER)
    (copy / "train.jsonl").write_text("half")
    with pytest.raises(StoreError, match="lacks or changed 1 of its files, e.g. train.jsonl"):
        store.get_dir(uri, tmp_path / "copy", MARKER)
    (copy / "sub" / "rows.jsonl").unlink()
    with pytest.raises(StoreError, match="lacks or changed 2 of its files, e.g. sub/rows.jsonl"):
        store.get_dir(uri, tmp_path / "copy", MARKER)
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("not a copy")
    with pytest.raises(StoreError, match=f"foreign already exists but has no {MARKER}.*new or empty directory"):
        store.get_dir(uri, tmp_path / "foreign", MARKER)
    assert [p.name for p in (tmp_path / "foreign").iterdir()] == ["notes.txt"]  # left as it was


def test_an_interrupted_put_is_incomplete_and_can_be_retried(store, tmp_path):
    source = folder(tmp_path / "source")

    def crash(name: str, size_bytes: int) -> None:
        if name == "train.jsonl":
            raise KeyboardInterrupt("killed mid-upload")

    with pytest.raises(KeyboardInterrupt):
        store.put_dir(source, "k/v", MARKER, progress=crash)
    assert not store.complete("k/v", MARKER) and store.complete_keys("k", MARKER) == []
    with pytest.raises(NotFoundError, match=f"no complete folder at .*k/v.*no {MARKER}"):
        store.get_dir(store.uri("k/v"), tmp_path / "out", MARKER)
    store.put_dir(source, "k/v", MARKER)
    assert tree(store.get_dir(store.uri("k/v"), tmp_path / "out", MARKER)) == tree(source)


def test_duplicates_unmarked_folders_and_bad_keys_are_refused(store, tmp_path):
    source = folder(tmp_path / "source")
    store.put_dir(source, "k/v", MARKER)
    with pytest.raises(StoreError, match="k/v already exists; upload under another key"):
        store.put_dir(source, "k/v", MARKER)
    with pytest.raises(StoreError, match=f"has no {MARKER}; write it"):
        store.put_dir(source / "sub", "k/w", MARKER)
    for key in ("x/../y", "/x", "x//y", ""):
        with pytest.raises(StoreError, match=f"key {key!r} is not usable"):
            store.put_dir(source, key, MARKER)
    with pytest.raises(StoreError, match="download it with .*store for its"):
        store.get_dir("s3://elsewhere/k/v" if store.uri("k").startswith("file:") else "file:///k/v", tmp_path, MARKER)


def test_small_files_are_replaced_whole_and_folders_deleted(store, tmp_path):
    assert store.get_text("run/latest") is None
    store.put_text("run/latest", "step-000001\n")
    store.put_text("run/latest", "step-000002\n")
    assert store.get_text("run/latest") == "step-000002\n"
    store.put_dir(folder(tmp_path / "source"), "run/step-000002", MARKER)
    store.delete("run/step-000002")
    store.delete("never/put")
    assert not store.complete("run/step-000002", MARKER) and store.get_text("run/latest") == "step-000002\n"
    with pytest.raises(NotFoundError):
        store.get_dir(store.uri("run/step-000002"), tmp_path / "out", MARKER)


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("file:///data/ckpt/run/step-000001", StoreUri("file", "", "/data/ckpt/run/step-000001")),
        ("file://localhost/data/ckpt/", StoreUri("file", "", "/data/ckpt")),
        ("file:///my%20dir/x", StoreUri("file", "", "/my dir/x")),
        ("s3://checkpoints/runs/abc/step-000042", StoreUri("s3", "checkpoints", "runs/abc/step-000042")),
        ("s3://checkpoints/runs/", StoreUri("s3", "checkpoints", "runs")),
        ("s3://my.bucket-1", StoreUri("s3", "my.bucket-1", "")),
    ],
)
def test_uri_parsing_roundtrips(uri, expected):
    parsed = parse_uri(uri)
    assert parsed == expected
    assert parse_uri(str(parsed)) == parsed


@pytest.mark.parametrize(
    ("uri", "fix"),
    [
        ("file://relative/dir", "file:///absolute/dir"),
        ("/data/ckpt", "scheme ''; use file:///absolute/dir or s3://bucket/prefix"),
        ("gs://bucket/x", "scheme 'gs'"),
        ("s3://Bad_Bucket/x", "bucket 'Bad_Bucket'"),
        ("s3:///x", "bucket ''"),
        ("s3://bucket/x?versionId=1", "remove the"),
    ],
)
def test_bad_uris_are_refused_with_the_fix(uri, fix):
    with pytest.raises(StoreError, match=fix.replace("?", r"\?")):
        parse_uri(uri)


def test_the_root_uri_builds_the_store_and_names_the_fix(tmp_path, s3_endpoint):
    local = directory_store(tmp_path.as_uri())
    assert isinstance(local, LocalStore) and local.root == tmp_path
    s3_store = directory_store("s3://bucket-a/team/runs", s3_endpoint)
    assert isinstance(s3_store, S3Store) and (s3_store.bucket, s3_store.prefix) == ("bucket-a", "team/runs")
    with pytest.raises(StoreError, match="no endpoint is configured"):
        directory_store("s3://bucket-a/runs")
    with pytest.raises(StoreError, match="drop the endpoint"):
        directory_store(tmp_path.as_uri(), s3_endpoint)
    with pytest.raises(StoreError, match="'http://minio:9000' must be 'host:port'"):
        S3Endpoint("http://minio:9000", "key", "secret")
