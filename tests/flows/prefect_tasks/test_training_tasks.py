"""Resume lookup and checkpoint publishing through a local checkpoint store (no Prefect server: `.fn`)."""

from __future__ import annotations

import pytest

from flows.prefect_tasks.training import find_resume_point, publish_checkpoint
from storage.checkpoint_layout import CheckpointError
from storage.checkpoint_store import CheckpointStore
from storage.directory_store import directory_store
from trainer.checkpoints import META_FILE
from trainer.loop_state import LOOP_STATE_FILE, LoopState, save_loop_state


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
    uri = publish_checkpoint.fn(store, checkpoint(tmp_path, 2), "run", state)
    path, found = find_resume_point.fn(store, "run", tmp_path / "resume1")
    assert found == state and (path / "model.safetensors").read_bytes() == b"weights" and uri == store.latest("run")


def test_a_checkpoint_without_loop_state_cannot_be_resumed_from(tmp_path):
    store = CheckpointStore(directory_store((tmp_path / "store").as_uri()))
    store.upload(checkpoint(tmp_path, 1), "run", 1)
    with pytest.raises(RuntimeError, match="has no loop state"):
        find_resume_point.fn(store, "run", tmp_path / "resume")
    assert LOOP_STATE_FILE not in {p.name for p in (tmp_path / "local" / "step-000001").iterdir()}


def test_the_store_numbers_a_checkpoint_by_its_policy_version_not_the_iteration(tmp_path):
    store = CheckpointStore(directory_store((tmp_path / "store").as_uri()))
    state = LoopState(run_name="run", iteration=5, next_task=12, policy_version=2, tracking_run_id="abc")
    assert publish_checkpoint.fn(store, checkpoint(tmp_path, 2), "run", state).endswith("/run/step-000002")
    with pytest.raises(CheckpointError, match="numbered 3 but holds policy version 2"):
        publish_checkpoint.fn(store, checkpoint(tmp_path / "other", 3), "run", state)


def test_a_run_the_store_numbered_by_iteration_is_refused_at_resume_naming_the_fix(tmp_path):
    """An older harnessrl uploaded iteration 5's checkpoint (policy version 2) as step-000005: its next checkpoints,
    numbered by version, would collide with that run's, so it is refused with the ways out."""
    store = CheckpointStore(directory_store((tmp_path / "store").as_uri()))
    old = checkpoint(tmp_path, 5)
    save_loop_state(old, LoopState(run_name="run", iteration=5, next_task=12, policy_version=2, tracking_run_id="a"))
    store.upload(old, "run", 5)
    with pytest.raises(CheckpointError, match=r"numbered 5 but holds policy version 2: an older harnessrl numbered "
                                              r"the store's checkpoints by loop iteration.*Start a new run \(another "
                                              r"name\) from its weights, `--set engine.model="):
        find_resume_point.fn(store, "run", tmp_path / "resume")


def test_a_run_whose_iterations_all_stepped_resumes_from_the_older_numbering(tmp_path):
    """Where every iteration stepped, the older numbering by iteration is the numbering by version: it resumes."""
    store = CheckpointStore(directory_store((tmp_path / "store").as_uri()))
    old = checkpoint(tmp_path, 2)
    state = LoopState(run_name="run", iteration=2, next_task=8, policy_version=2, tracking_run_id="a")
    save_loop_state(old, state)
    store.upload(old, "run", 2)
    assert find_resume_point.fn(store, "run", tmp_path / "resume")[1] == state
