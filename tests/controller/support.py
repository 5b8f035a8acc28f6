"""Test doubles for the controller: a tiny recipe whose harness is tests/controller/harness_script.py."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.attempt import Attempt
from controller.outcomes import Outcome
from controller.recipe import Grade, GradeInput, final_text
from controller.report import report_attempt
from controller.runners.base import RunnerStartError, RunResult, RunSpec, Termination
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


def report_failed_exit(admin: Any, claimed: Any, tmp_path: Path) -> Outcome | None:
    """What the controller reports for `claimed`'s first attempt when its harness exited with code 1 (graded by
    ScriptRecipe, read through `admin`, controller "ctl")."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    spec = RunSpec(rollout_id=claimed.id, attempt=1, command=("true",), base_url="", api_key="", task={},
                   workdir=workdir, timeout_s=1, stdout_path=tmp_path / "o", stderr_path=tmp_path / "e")
    result = RunResult(claimed.id, 1, Termination.EXITED, 1, "exited with code 1", 0.1)
    return report_attempt(Attempt(claimed, ScriptRecipe(), spec), result, admin, admin, "ctl", 600.0)


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
