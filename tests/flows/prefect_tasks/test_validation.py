"""The validation pass as the training flow runs it (no Prefect server: `.fn`): rewards, unfinished tasks, and the
recorded calls it fetches when asked (mini-swe-agent's action-format rate on the same tasks every time)."""

from __future__ import annotations

from flows.prefect_tasks.rollouts import run_validation
from recipes.swe.run_metrics import swe_rollout_metrics
from tests.trainer.loop_support import FakeGateway, call

GOOD = "```bash\nsed -i 's/a/b/' m.py\n```"


def gateway_that_finishes_everything(answers: dict[str, str]) -> FakeGateway:
    """A gateway whose rollouts finish on the first poll, rollout `val-<task>-<i>` answering `answers[...]`."""
    gateway = FakeGateway()
    original = gateway.finished

    def finished(after=0, limit=100, wait_s=0.0):
        for spec in gateway.created[len(gateway.finished_log):]:
            gateway.finish(spec.id, 1.0 if answers[spec.id] == GOOD else 0.0)
            gateway.call_log[spec.id] = [call(spec.id, 0, response_text=answers[spec.id])]
        return original(after, limit, wait_s)

    gateway.finished = finished
    return gateway


def test_validation_fetches_the_calls_only_when_asked_and_they_give_the_format_rate_per_level():
    rows = [{"id": "t0", "level": 0, "harness_config": "one_command"},
            {"id": "t1", "level": 3, "harness_config": "one_command"}]
    answers = {"val-0-0": GOOD, "val-0-1": GOOD, "val-1-0": GOOD, "val-1-1": "I would edit m.py."}
    with_calls = gateway_that_finishes_everything(answers)
    metrics, groups = run_validation.fn(with_calls, rows, "val", 2, 0, 10.0, 1.0, fetch_calls=True)
    assert metrics["val/reward_mean"] == 3 / 4 and metrics["val/unfinished_tasks"] == 0.0
    assert all(len(calls) == 1 for g in groups for calls in g.calls.values())
    swe = swe_rollout_metrics(groups, 1.0, "val", mini_swe_agent=True)
    assert (swe["val/action_format_rate"], swe["val/level0/action_format_rate"],
            swe["val/level3/action_format_rate"]) == (3 / 4, 1.0, 1 / 2)
    without = gateway_that_finishes_everything(answers)
    _, groups = run_validation.fn(without, rows, "val", 2, 0, 10.0, 1.0)
    assert without.call_requests == [] and all(calls == () for g in groups for calls in g.calls.values())
    assert "val/action_format_rate" not in swe_rollout_metrics(groups, 1.0, "val", mini_swe_agent=True)
