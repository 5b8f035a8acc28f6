"""Resume lookup and checkpoint publishing through a local checkpoint store (no Prefect server: `.fn`)."""

from __future__ import annotations

import pytest

from storage.checkpoint_store import CheckpointStore
from storage.directory_store import directory_store
from tasks.training import find_resume_point, publish_checkpoint
from trainer.checkpoints import META_FILE
from trainer.loop_state import LOOP_STATE_FILE, LoopState


def checkpoint(tmp_path, step: int):
    path = tmp_path / "local" / f"step-{step:06d}"
    path.mkdir(parents=True)
    (path / META_FILE).write_text('{"format_version": 1, "policy_version": 2, "step": 2, "optimizer_updates": 2, '
                                  '"base_model": "/m", "created_at": 0.0}')
    (path / "model.safetensors").write_bytes(b"weights")
    return path


def test_publish_then_resume_returns_the_checkpoint_and_its_loop_state(tmp_path):
    store = CheckpointStore(directory_store((tmp_path / "store").as_uri()))
    assert find_resume_point.fn(store, "run", tmp_path / "resume0") is None
    state = LoopState(run_name="run", iteration=3, next_task=12, policy_version=2, tracking_run_id="abc")
    uri = publish_checkpoint.fn(store, checkpoint(tmp_path, 2), "run", 3, state)
    path, found = find_resume_point.fn(store, "run", tmp_path / "resume1")
    assert found == state and (path / "model.safetensors").read_bytes() == b"weights" and uri == store.latest("run")


def test_a_checkpoint_without_loop_state_cannot_be_resumed_from(tmp_path):
    store = CheckpointStore(directory_store((tmp_path / "store").as_uri()))
    store.upload(checkpoint(tmp_path, 1), "run", 1)
    with pytest.raises(RuntimeError, match="has no loop state"):
        find_resume_point.fn(store, "run", tmp_path / "resume")
    assert LOOP_STATE_FILE not in {p.name for p in (tmp_path / "local" / "step-000001").iterdir()}
