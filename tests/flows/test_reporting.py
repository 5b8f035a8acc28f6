"""What the flow says when an iteration trains nothing: staleness is named as such, flat rewards as flat rewards."""

from __future__ import annotations

from gateway.records import RolloutState
from rollouts.recipe import DEFAULT_NO_SIGNAL_HINT, recipe_hooks
from rollouts.registry import get_recipe
from tests.trainer.loop_support import call, group, rollout
from tracking.reports import no_signal_message, rollout_phase_metrics, summary_lines, throughput_metrics
from trainer.rollout_groups import FinishedGroup, drop_stale


def test_all_stale_is_reported_as_staleness_not_as_the_model():
    groups = [group("a", [1.0, 0.0], version=0), group("b", [0.5, 0.0], version=1)]
    message = no_signal_message(3, groups, drop_stale(groups, 5, 2), "a hint", "m", 2)
    assert "all 4 rollouts" in message and "max_version_lag=2" in message and "largest lag is 5" in message
    assert "no gradient signal" not in message


def test_flat_rewards_name_the_rewards_seen_and_the_recipe_hint():
    groups = [group("a", [0.0, 0.0], version=5), group("b", [1.0, 1.0], version=5)]
    hint = recipe_hooks(get_recipe("swe")).no_signal_hint
    message = no_signal_message(2, groups, drop_stale(groups, 5, 2), hint, "smollm2-135m-instruct", 2)
    assert "no gradient signal" in message and "rewards seen: 0, 1" in message and "7B-class" in message


def test_a_recipe_without_a_hint_gets_the_default_one():
    class Bare:
        name = "bare"

    groups = [group("a", [0.0, 0.0], version=5)]
    message = no_signal_message(2, groups, drop_stale(groups, 5, 2), recipe_hooks(Bare()).no_signal_hint, "m", 2)
    assert message.endswith(f"{DEFAULT_NO_SIGNAL_HINT}.") and "shaping_shares" in message


def test_failed_rollouts_are_counted_by_kind_not_hidden():
    members = (rollout("a-0", "a", None, state=RolloutState.FAILED, failure_kind="agent"),
               rollout("a-1", "a", None, state=RolloutState.FAILED, failure_kind="agent"),
               rollout("a-2", "a", 0.0))
    groups = [FinishedGroup("a", {}, members, {r.id: (call(r.id, 0, 5, [5]),) for r in members}, 5)]
    message = no_signal_message(1, groups, drop_stale(groups, 5, 2), "a hint", "m", 2)
    assert "rewards seen: 0; 2 rollouts failed (agent: 2)" in message
    assert "agent_failure_reward" in message


def test_throughput_and_summary_lines():
    metrics = throughput_metrics([group("a", [1.0, 0.0], version=0)], iteration_s=2.0)
    assert metrics["throughput/response_tokens"] == 4.0 and metrics["throughput/response_tokens_per_s"] == 2.0
    lines = summary_lines({"run_name": "r", "iterations": 3, "updates": 1, "mlflow_run_id": "abc",
                           "checkpoint_uri": "file:///c", "no_signal_iterations": 2}, "mlflow ui")
    assert lines[0] == "run r: 3 iterations, 1 updates" and "last checkpoint: file:///c" in lines
    assert lines[-1].startswith("2 of 3 iterations trained nothing")


def test_rollout_phases_split_each_rollouts_wall_time_at_its_first_and_last_call():
    # a: claimed at 100, calls arrive at 103 (2 s) and 106 (1 s), ends at 110: 3 s before, 3 s in calls, 3 s after
    # b: claimed at 200, one call at 201 (4 s), ends at 206: 1, 4, 1; its earlier attempt's call is not counted
    a = rollout("a", "g", 1.0, started_at=100.0, finished_at=110.0)
    b = rollout("b", "g", 0.0, started_at=200.0, finished_at=206.0, attempt=2)
    no_calls = rollout("c", "g", 0.0, started_at=300.0, finished_at=301.0)
    calls = {"a": (call("a", 0, created_at=103.0, latency_ms=2000.0),
                   call("a", 1, created_at=106.0, latency_ms=1000.0)),
             "b": (call("b", 0, created_at=150.0, latency_ms=9000.0, attempt=1),
                   call("b", 0, created_at=201.0, latency_ms=4000.0, attempt=2)), "c": ()}
    metrics = rollout_phase_metrics([FinishedGroup("g", {}, (a, b, no_calls), calls, 0)])
    assert metrics == {"time/rollout_to_first_call_s": 2.0, "time/rollout_in_calls_s": 3.5,
                       "time/rollout_after_calls_s": 2.0, "time/rollout_wall_s": 8.0}
    assert rollout_phase_metrics([FinishedGroup("g", {}, (no_calls,), {"c": ()}, 0)]) == {}, "nothing to say"
