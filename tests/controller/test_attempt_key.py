"""An attempt runs with the base URL and key its claim returned (no second request to the gateway), and neither the
attempt's nor its RunSpec's repr shows the key (a credential: logs must not carry it)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from controller.attempt import prepare_attempt
from controller.config import ControllerConfig
from gateway.records import ClaimedRollout, RolloutMode, RolloutState

KEY = "hrl.cjE.1.secret-mac-of-the-test"


class Echo:
    name = "echo"

    def harness_command(self) -> list[str]:
        return [sys.executable, "-c", "pass"]

    def prepare_workdir(self, task: dict[str, Any], workdir: Path) -> None:
        (workdir / "prepared").write_text("yes")


def test_the_claims_key_reaches_the_run_spec_and_no_repr(tmp_path: Path) -> None:
    claimed = ClaimedRollout(id="r1", group_id="g", input={"id": "t"}, mode=RolloutMode.TRAIN,
                             state=RolloutState.RUNNING, attempt=2, max_attempts=3, created_at=0.0,
                             base_url="http://gw/r/r1/v1", api_key=KEY)
    attempt = prepare_attempt(ControllerConfig(work_dir=tmp_path / "work", logs_dir=tmp_path / "logs"), claimed,
                              Echo())
    assert (attempt.spec.base_url, attempt.spec.api_key, attempt.spec.attempt) == ("http://gw/r/r1/v1", KEY, 2)
    assert (attempt.spec.workdir / "prepared").read_text() == "yes"
    assert KEY not in repr(attempt) and KEY not in repr(attempt.spec) and KEY not in str(claimed)
