"""The `Backend` seam: what the training loop needs from whatever applies a policy update."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from trainer.samples import Sample


@dataclass(frozen=True, eq=False)
class TrainBatch:
    """The samples of one training step and the advantage of each (samples to skip are left out)."""

    samples: tuple[Sample, ...]
    """Samples to train on; all samples of a rollout must be present (rollout-level denominators)."""
    advantages_S: np.ndarray
    """Advantage of each sample (float64), broadcast to its trainable tokens."""

    def __post_init__(self) -> None:
        advantages_S = np.asarray(self.advantages_S, dtype=np.float64)
        if advantages_S.shape != (len(self.samples),):
            raise ValueError(
                f"TrainBatch has {len(self.samples)} samples but advantages_S has shape "
                f"{advantages_S.shape}; pass one advantage per sample"
            )
        if not np.isfinite(advantages_S).all():
            raise ValueError("TrainBatch.advantages_S has NaN or infinite values; fix the rewards or advantages")
        object.__setattr__(self, "advantages_S", advantages_S)

    @classmethod
    def of(cls, samples: Sequence[Sample], advantages_S: Sequence[float] | np.ndarray) -> TrainBatch:
        """A batch from any sequence of samples and advantages."""
        return cls(tuple(samples), np.asarray(advantages_S, dtype=np.float64))


class Backend(Protocol):
    """Holds the policy's weights and optimizer; turns batches into updates and checkpoints."""

    @property
    def policy_version(self) -> int:
        """Version of the current weights (each train_step adds one)."""
        ...

    def load(self) -> None:
        """Loads the model and optimizer (from the base model, or resumes from a checkpoint)."""
        ...

    def train_step(self, batch: TrainBatch) -> Mapping[str, float]:
        """Applies one training step to the batch and returns its metrics."""
        ...

    def save_checkpoint(self, directory: Path) -> tuple[Path, int]:
        """Writes a checkpoint under `directory`; returns its path and the policy version it holds."""
        ...
