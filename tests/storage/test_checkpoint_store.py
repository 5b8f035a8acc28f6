"""Checkpoints on the directory store (`RUN/step-NNNNNN` and `RUN/latest`), local and on a real S3 server (moto)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
import torch
from minio import Minio
from safetensors.torch import load_file, save_file

from storage.checkpoint_layout import CheckpointError
from storage.checkpoint_store import CheckpointStore
from storage.directory_store import directory_store
from storage.errors import NotFoundError, StoreError
from storage.s3_store import S3Store
from trainer import checkpoints

MULTIPART_BYTES = 12 * 1024 * 1024
"""Larger than the minio client's 5 MiB part size, so the upload is multipart."""


class FakeModel:
    """Writes what `save_pretrained` writes, with a few small random weights."""

    def __init__(self, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.weights = {"embed.weight": torch.randn(8, 4, generator=generator), "head.bias": torch.randn(8)}

    def save_pretrained(self, directory: str) -> None:
        save_file(self.weights, os.path.join(directory, "model.safetensors"))
        Path(directory, "config.json").write_text(json.dumps({"model_type": "fake", "hidden_size": 4}))


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path: Path) -> CheckpointStore:
    if request.param == "local":
        return CheckpointStore(directory_store((tmp_path / "store").as_uri()))
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"  # a fresh bucket per test; the store creates it on first upload
    return CheckpointStore(directory_store(f"s3://{bucket}/runs/v1", request.getfixturevalue("s3_endpoint")))


def write_checkpoint(root: Path, step: int, extra_bytes: int = 0, created_at: float = 1.0) -> Path:
    """A real checkpoint directory from trainer.checkpoints, optionally with a large extra file."""
    tokenizer_dir = root / "tokenizer-source"
    tokenizer_dir.mkdir(parents=True, exist_ok=True)
    (tokenizer_dir / "tokenizer.json").write_text('{"version": "1.0"}')
    parameter = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.SGD([parameter], lr=0.1, momentum=0.9)
    parameter.sum().backward()
    optimizer.step()
    meta = checkpoints.CheckpointMeta(
        policy_version=step, step=step, optimizer_updates=step, base_model="/models/fake", created_at=created_at
    )
    path = checkpoints.save_checkpoint(root / "local", FakeModel(step), optimizer, meta, tokenizer_dir)
    if extra_bytes:
        (path / "shards").mkdir()
        (path / "shards" / "big.bin").write_bytes(os.urandom(extra_bytes))
    return path


def tree(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_roundtrip_keeps_every_file_including_a_multipart_one(store, tmp_path):
    source = write_checkpoint(tmp_path, step=7, extra_bytes=MULTIPART_BYTES)
    uri = store.upload(source, "run-1", 7)
    assert uri.endswith("/run-1/step-000007")
    restored = store.download(uri, tmp_path / "restored")
    assert restored == tmp_path / "restored" / "step-000007"
    assert tree(restored) == tree(source)
    assert checkpoints.read_meta(restored).policy_version == 7
    assert torch.equal(load_file(restored / "model.safetensors")["embed.weight"], FakeModel(7).weights["embed.weight"])
    assert "momentum_buffer" in checkpoints.load_optimizer_state(restored)["state"][0]
    assert [p.name for p in (tmp_path / "restored").iterdir()] == ["step-000007"]  # no staging left


def test_large_file_is_uploaded_in_parts(s3_endpoint, tmp_path):
    store = CheckpointStore(S3Store(s3_endpoint, bucket="multipart"))
    store.upload(write_checkpoint(tmp_path, step=1, extra_bytes=MULTIPART_BYTES), "run", 1)
    client = Minio(s3_endpoint.endpoint, access_key="test", secret_key="test", secure=False)
    stat = client.stat_object("multipart", "run/step-000001/shards/big.bin")
    assert stat.size == MULTIPART_BYTES
    assert stat.etag.endswith("-3")  # 5 + 5 + 2 MiB parts


def test_latest_moves_only_after_the_whole_upload(store, tmp_path):
    assert store.latest("run") is None
    first = store.upload(write_checkpoint(tmp_path / "a", step=1), "run", 1)
    assert store.latest("run") == first
    second_dir = write_checkpoint(tmp_path / "b", step=2)
    seen: list[tuple[str, str | None, list[str]]] = []

    def observe(name: str, size_bytes: int) -> None:
        seen.append((name, store.latest("run"), store.list("run")))

    second = store.upload(second_dir, "run", 2, progress=observe)
    assert [name for name, _, _ in seen][-1] == checkpoints.META_FILE  # the meta file goes last
    assert all(latest == first for _, latest, _ in seen)
    assert all(listed == [first] for _, _, listed in seen[:-1])  # complete (listed) only once its meta file is in
    assert store.latest("run") == second


def test_an_interrupted_upload_is_neither_latest_nor_listed_and_can_be_retried(store, tmp_path):
    first = store.upload(write_checkpoint(tmp_path / "a", step=1), "run", 1)
    second_dir = write_checkpoint(tmp_path / "b", step=2)

    def crash(name: str, size_bytes: int) -> None:
        if name == "model.safetensors":
            raise KeyboardInterrupt("trainer killed mid-upload")

    with pytest.raises(KeyboardInterrupt):
        store.upload(second_dir, "run", 2, progress=crash)
    assert store.latest("run") == first
    assert store.list("run") == [first]
    with pytest.raises(NotFoundError, match="step-000002"):
        store.download(first.replace("step-000001", "step-000002"), tmp_path / "restored")
    second = store.upload(second_dir, "run", 2)
    assert store.latest("run") == second
    assert tree(store.download(second, tmp_path / "restored")) == tree(second_dir)


def test_listing_is_ordered_by_step_and_per_run(store, tmp_path):
    uris = {step: store.upload(write_checkpoint(tmp_path / str(step), step), "run", step) for step in (10, 2, 1000000)}
    store.upload(write_checkpoint(tmp_path / "other", 5), "other-run", 5)
    assert store.list("run") == [uris[2], uris[10], uris[1000000]]
    assert store.latest("run") == uris[1000000]  # the last upload
    assert store.list("never-uploaded") == []
    assert store.latest("never-uploaded") is None


def test_missing_checkpoints_duplicates_and_bad_inputs_are_refused(store, tmp_path):
    uri = store.upload(write_checkpoint(tmp_path, step=3), "run", 3)
    with pytest.raises(NotFoundError, match="step-000004.*list"):
        store.download(uri.replace("step-000003", "step-000004"), tmp_path / "out")
    with pytest.raises(StoreError, match="run/step-000003 already exists"):
        store.upload(tmp_path / "local" / "step-000003", "run", 3)
    with pytest.raises(StoreError, match="has no harnessrl-checkpoint.json"):
        store.upload(tmp_path, "run", 4)
    with pytest.raises(CheckpointError, match="run id '../x'"):
        store.upload(tmp_path / "local" / "step-000003", "../x", 4)
    with pytest.raises(CheckpointError, match="policy version -1 is negative"):
        store.upload(tmp_path / "local" / "step-000003", "run", -1)
    store.store.put_text("run/latest", "step-000009\n")
    with pytest.raises(CheckpointError, match="latest names 'step-000009', not a complete checkpoint; fix or remove"):
        store.latest("run")


def test_downloading_the_same_checkpoint_twice_reuses_the_first_copy(store, tmp_path):
    """A run that crashes twice resumes twice from one checkpoint into the same folder."""
    source = write_checkpoint(tmp_path, step=3)
    uri = store.upload(source, "run", 3)
    first = store.download(uri, tmp_path / "resume")
    (first / "sentinel.txt").write_text("left by the first download")
    second = store.download(uri, tmp_path / "resume")
    assert second == first == tmp_path / "resume" / "step-000003"
    assert (second / "sentinel.txt").is_file()  # not downloaded again
    assert {k: v for k, v in tree(second).items() if k != "sentinel.txt"} == tree(source)
    assert [p.name for p in (tmp_path / "resume").iterdir()] == ["step-000003"]  # no staging left
    other = store.upload(write_checkpoint(tmp_path / "b", step=3, created_at=2.0), "other-run", 3)
    with pytest.raises(StoreError, match=r"step-000003 already exists but holds another folder.*remove it"):
        store.download(other, tmp_path / "resume")
