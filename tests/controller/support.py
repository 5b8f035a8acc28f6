"""Test doubles for the controller: a tiny recipe whose harness is tests/controller/harness_script.py."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.recipe import Grade, GradeInput, final_text
from controller.runners.base import RunnerStartError, RunSpec
from controller.runners.local import LocalRunner

HARNESS = Path(__file__).with_name("harness_script.py")


@dataclass
class ScriptRecipe:
    """A recipe for tests: reward 1.0 when the last call answered, else 0.0; `grade_agent_failures` as given."""

    name: str = "script"
    grade_agent_failures: bool = False

    def generate(self, count: int, seed: int) -> list[dict[str, Any]]:
        return [{"id": f"t{seed}-{i}", "mode": "ok"} for i in range(count)]

    def harness_command(self) -> list[str]:
        return [sys.executable, str(HARNESS)]

    def prepare_workdir(self, task: dict[str, Any], workdir: Path) -> None:
        (workdir / "prepared.txt").write_text(task["mode"])

    def grade(self, graded: GradeInput) -> Grade:
        prepared = (graded.workdir / "prepared.txt").read_text()
        return Grade(reward=1.0 if final_text(graded.calls) else 0.0,
                     details={"calls": len(graded.calls), "prepared": prepared, "exit_code": graded.exit_code})


class FlakyStartRunner(LocalRunner):
    """A LocalRunner whose first start of each rollout fails as an infrastructure error would."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refused: list[str] = []

    def start(self, spec: RunSpec) -> None:
        if spec.rollout_id not in self.refused:
            self.refused.append(spec.rollout_id)
            raise RunnerStartError(f"node for {spec.rollout_id} unavailable (test)")
        super().start(spec)
