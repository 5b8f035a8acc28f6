"""A task may carry its own harness budget; anything but a positive number is an error naming the value."""

from __future__ import annotations

import pytest

from controller.attempt import harness_timeout_s
from controller.config import ControllerConfig


@pytest.mark.parametrize(("task", "expected"), [({}, 1800.0), ({"harness_timeout_s": 5}, 5.0),
                                                ({"harness_timeout_s": 2.5}, 2.5)])
def test_the_task_budget_wins_over_the_controllers(task, expected):
    assert harness_timeout_s(ControllerConfig(), task) == expected


@pytest.mark.parametrize("bad", [0, -1, "5", True, None])
def test_bad_budgets_are_refused(bad):
    with pytest.raises(ValueError, match="harness_timeout_s"):
        harness_timeout_s(ControllerConfig(), {"harness_timeout_s": bad})
