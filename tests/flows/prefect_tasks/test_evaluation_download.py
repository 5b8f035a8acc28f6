"""The evaluation's checkpoint download through a local checkpoint store (no Prefect server: `.fn`)."""

from __future__ import annotations

import pytest

from flows.prefect_tasks.evaluation import download_checkpoint
from storage.checkpoint_store import CheckpointStore
from storage.directory_store import directory_store
from storage.errors import StoreError
from trainer.checkpoints import META_FILE


def checkpoint(tmp_path, name: str, created_at: float):
    """A minimal checkpoint folder: a meta file, a config and weights."""
    path = tmp_path / name / "step-000002"
    path.mkdir(parents=True)
    (path / META_FILE).write_text('{"format_version": 1, "policy_version": 2, "step": 2, "optimizer_updates": 2, '
                                  f'"base_model": "/m", "created_at": {created_at}}}')
    (path / "config.json").write_text('{"model_type": "fake"}')
    (path / "model.safetensors").write_bytes(f"weights of {name}".encode())
    return path


def test_a_second_download_into_the_same_folder_reuses_the_copy(tmp_path):
    store = CheckpointStore(directory_store((tmp_path / "store").as_uri()))
    uri = store.upload(checkpoint(tmp_path, "a", 0.0), "run", 2)
    first = download_checkpoint.fn(store, uri, tmp_path / "eval" / "checkpoint")
    assert download_checkpoint.fn(store, uri, tmp_path / "eval" / "checkpoint") == first
    assert (first / "model.safetensors").read_bytes() == b"weights of a"


def test_another_checkpoint_of_the_same_step_is_not_served_from_the_folder(tmp_path):
    store = CheckpointStore(directory_store((tmp_path / "store").as_uri()))
    first = store.upload(checkpoint(tmp_path, "a", 0.0), "run-a", 2)
    second = store.upload(checkpoint(tmp_path, "b", 1.0), "run-b", 2)
    download_checkpoint.fn(store, first, tmp_path / "eval" / "checkpoint")
    with pytest.raises(StoreError, match="holds another folder"):
        download_checkpoint.fn(store, second, tmp_path / "eval" / "checkpoint")
