"""Where a training run stands, saved beside each checkpoint so a crashed run resumes exactly there."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from storage.files import write_atomic

LOOP_STATE_FILE = "harnessrl-loop-state.json"


class LoopState(BaseModel):
    """The loop's position (the model and optimizer are in the checkpoint itself)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_name: str = Field(description="The run this state belongs to.")
    iteration: int = Field(ge=0, description="Iterations completed.")
    next_task: int = Field(ge=0, description="Index of the next training task to submit (the data position).")
    open_tasks: list[int] = Field(default_factory=list, description="Indices of the tasks whose groups were submitted "
                                  "but not trained on yet (in flight or complete): a resume submits them first.")
    policy_version: int = Field(ge=0, description="Policy version of the checkpoint's weights.")
    tracking_run_id: str | None = Field(default=None, description="The MLflow run that logs this training run.")


def save_loop_state(checkpoint_dir: Path, state: LoopState) -> Path:
    """Writes the state into a checkpoint directory (atomically)."""
    path = Path(checkpoint_dir) / LOOP_STATE_FILE
    write_atomic(path, state.model_dump_json(indent=2))
    return path


def read_loop_state(checkpoint_dir: Path) -> LoopState | None:
    """The state saved in a checkpoint directory, or None when it has none."""
    path = Path(checkpoint_dir) / LOOP_STATE_FILE
    return LoopState.model_validate_json(path.read_text()) if path.is_file() else None
