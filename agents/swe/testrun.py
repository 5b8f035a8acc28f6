"""Run a project's pytest tests (in the sandbox: no network, no git) and read back each test's outcome.

Third-party pytest plugins are not auto-loaded (PYTEST_DISABLE_PLUGIN_AUTOLOAD): faster start, and the tested project
sees plain pytest whatever is installed in the interpreter.
"""

from __future__ import annotations

import json
import shlex
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from agents.swe.sandbox import Sandbox

PLUGIN_DIR = Path(__file__).parent  # holds pytest_outcomes.py, loaded with `-p pytest_outcomes`


@dataclass(frozen=True)
class TestRun:
    """Outcomes of one pytest run."""

    __test__ = False  # not a pytest test class

    outcomes: dict[str, str]  # node id -> passed | failed | skipped (absent: not collected)
    messages: dict[str, str] = field(default_factory=dict)  # node id -> failure message (failed tests only)
    output_tail: str = ""  # the last lines of pytest's output, for diagnosis
    returncode: int = 0  # pytest's exit status

    def with_outcome(self, outcome: str) -> set[str]:
        """Node ids that ended with `outcome`."""
        return {node for node, seen in self.outcomes.items() if seen == outcome}


def run_tests(repo: Path, test_ids: list[str] | None = None, *, timeout_s: float = 300.0,
              allow_network: bool = False) -> TestRun:
    """Run `test_ids` (all tests when None) with `python -m pytest` in `repo`, sandboxed."""
    with tempfile.TemporaryDirectory(prefix="harnessrl-pytest-") as scratch:
        outcomes_path = Path(scratch) / "outcomes.json"
        sandbox = Sandbox(cwd=repo, shim_dir=Path(scratch) / "shim", allow_network=allow_network,
                          extra_env={"PYTHONPATH": str(PLUGIN_DIR), "HARNESSRL_PYTEST_OUTCOMES": str(outcomes_path),
                                     "PYTHONDONTWRITEBYTECODE": "1",
                                     "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
        argv = [sys.executable, "-m", "pytest", "-p", "pytest_outcomes", "-p", "no:cacheprovider", "-q",
                "--color=no", *(test_ids or [])]
        result = sandbox.run(shlex.join(argv), timeout_s)
        data = json.loads(outcomes_path.read_text()) if outcomes_path.exists() else {"outcomes": {}, "messages": {}}
    tail = "\n".join(result.output.splitlines()[-20:])
    return TestRun(outcomes=data["outcomes"], messages=data["messages"], output_tail=tail,
                   returncode=result.returncode)
