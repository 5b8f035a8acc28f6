"""The benchmark's recipe: tasks carry the duration distribution, the harness is heavy_tail_harness.py, and the
grader's reward is a deterministic function of (task seed, member) that differs inside every group.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.recipe import Grade, GradeInput

HARNESS = Path(__file__).with_name("heavy_tail_harness.py")
REWARD_LEVELS = (0.0, 1 / 3, 2 / 3, 1.0)


@dataclass(frozen=True)
class HeavyTailRecipe:
    """Tasks whose harness makes `calls` chat calls separated by log-normal "tool" time."""

    calls: int
    """Chat calls per rollout."""
    median_s: float
    """Median of a rollout's total sleep."""
    sigma: float
    """Log-normal sigma of the total sleep (1.0: p99 = 10x the median, 1.25: 18x)."""
    cap: float
    """Largest total sleep, in multiples of the median."""
    max_tokens: int
    """Completion tokens per call."""
    name: str = "heavy_tail"

    def generate(self, count: int, seed: int) -> list[dict[str, Any]]:
        return [{"id": f"bench-{seed}-{i}", "seed": seed * 100_003 + i, "calls": self.calls,
                 "median_s": self.median_s, "sigma": self.sigma, "cap": self.cap, "max_tokens": self.max_tokens}
                for i in range(count)]

    def harness_command(self) -> list[str]:
        return [sys.executable, str(HARNESS)]

    def prepare_workdir(self, task: dict[str, Any], workdir: Path) -> None:
        """Nothing to lay out: the task file is all the harness reads."""

    def grade(self, graded: GradeInput) -> Grade:
        member = int((graded.workdir / "member.txt").read_text())
        return Grade(reward=member_reward(graded.task["seed"], member), details={"calls": len(graded.calls)})


def member_reward(seed: int, member: int) -> float:
    """A reward that depends only on (seed, member); the members of a group of up to four all differ."""
    return REWARD_LEVELS[(seed + member) % len(REWARD_LEVELS)]
