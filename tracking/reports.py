"""What the training flow tells people: the no-signal explanation, the closing summary, throughput metrics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from gateway.records import CallRecord, CallStatus, Rollout
from rollouts.groups import FinishedGroup
from tracking.trajectories import sample_for_display
from trainer.rollout_groups import StalenessSplit


def no_signal_message(iteration: int, groups: Sequence[FinishedGroup], split: StalenessSplit, hint: str,
                      model: str, max_version_lag: int) -> str:
    """Plain words for an iteration that trained nothing: every rollout too stale, or no group with reward variance
    (then `hint`, the recipe's advice: its `no_signal_hint` hook)."""
    if not split.kept:
        rollouts = sum(len(g.rollouts) for g in groups)
        return (f"iteration {iteration}: nothing to train on - all {rollouts} rollouts of the {len(groups)} groups "
                f"lag more than rollout.max_version_lag={max_version_lag} policy versions behind the trainer (the "
                f"largest lag is {split.lag_max}). Keep fewer groups in flight (rollout.max_inflight_groups) or allow "
                "a larger lag.")
    rewards = [r.reward for g in split.kept for r in g.rollouts if r.reward is not None]
    seen = ", ".join(f"{value:g}" for value in sorted(set(rewards))) or "none"
    return (f"iteration {iteration}: no gradient signal - in each of the {len(split.kept)} groups every rollout got "
            f"the same reward (rewards seen: {seen}{failures_clause(split)}), so every advantage is 0 and nothing "
            f"was trained. The policy {model!r} gets the same reward on every attempt of a task; "
            f"{hint}.")


def failures_clause(split: StalenessSplit) -> str:
    """"; N failed (agent: a, infra: b) ..." for the failed rollouts of the kept groups, or ""."""
    kinds = Counter(r.failure_kind or "unknown" for g in split.kept for r in g.rollouts
                    if r.failure_kind is not None or r.reward is None)
    if not kinds:
        return ""
    counts = ", ".join(f"{kind}: {n}" for kind, n in sorted(kinds.items()))
    return (f"; {sum(kinds.values())} rollouts failed ({counts}): agent failures (a crash, a timeout) count at the "
            "recipe's failure reward the controller posts (one without a reward at "
            "algorithm.advantage.agent_failure_reward), infrastructure failures are left out of their group")


def throughput_metrics(groups: Sequence[FinishedGroup], iteration_s: float) -> dict[str, float]:
    """Generated tokens and calls of the batch per second of the iteration's wall-clock time."""
    tokens = sum(len(c.response_token_ids) for g in groups for calls in g.calls.values() for c in calls
                 if c.status == CallStatus.OK)
    calls = sum(len(calls) for g in groups for calls in g.calls.values())
    return {"throughput/response_tokens": float(tokens), "throughput/calls": float(calls),
            "time/iteration_s": iteration_s,
            "throughput/response_tokens_per_s": tokens / iteration_s if iteration_s > 0 else 0.0}


def rollout_phase_metrics(groups: Sequence[FinishedGroup]) -> dict[str, float]:
    """Where a rollout's wall time went, mean over the batch's rollouts with a start, an end and a recorded call of
    their final attempt: `time/rollout_to_first_call_s` (claim to the first call's arrival: the sandbox, the harness's
    start-up, its work before asking), `time/rollout_in_calls_s` (the sum of its calls' latencies: the engine),
    `time/rollout_after_calls_s` (the last answer to the end: the harness's last steps, its exit, the grading and
    the report) and `time/rollout_wall_s`. Nothing when no rollout qualifies (a feed that does not fetch calls)."""
    phases: list[tuple[float, float, float, float]] = []
    for g in groups:
        for r in g.rollouts:
            calls = [c for c in g.calls.get(r.id, ()) if c.attempt == r.attempt]
            if not calls or r.started_at is None or r.finished_at is None:
                continue
            first_in = min(c.created_at for c in calls)
            last_out = max(c.created_at + c.latency_ms / 1000.0 for c in calls)
            phases.append((first_in - r.started_at, sum(c.latency_ms for c in calls) / 1000.0,
                           r.finished_at - last_out, r.finished_at - r.started_at))
    if not phases:
        return {}
    names = ("time/rollout_to_first_call_s", "time/rollout_in_calls_s", "time/rollout_after_calls_s",
             "time/rollout_wall_s")
    return {name: sum(p[i] for p in phases) / len(phases) for i, name in enumerate(names)}


def summary_lines(summary: dict[str, Any], ui: str) -> list[str]:
    """The closing lines of a run: what ran, where it is logged, how to look at it."""
    lines = [f"run {summary['run_name']}: {summary['iterations']} iterations, {summary['updates']} updates",
             f"MLflow run: {summary['mlflow_run_id']}",
             f"open the MLflow UI: {ui}"]
    if summary.get("checkpoint_uri"):
        lines.append(f"last checkpoint: {summary['checkpoint_uri']}")
    if summary["no_signal_iterations"]:
        lines.append(f"{summary['no_signal_iterations']} of {summary['iterations']} iterations trained nothing (no "
                     "group with reward variance, or every rollout too stale): the policy did not learn from them")
    return lines


def trajectory_items(groups: Sequence[FinishedGroup], k: int, seed: int) -> list[tuple[Rollout, Sequence[CallRecord]]]:
    """Up to `k` rollouts of the batch (high and low rewards both shown) with their calls, for rendering."""
    calls = {rid: group_calls for g in groups for rid, group_calls in g.calls.items()}
    shown = sample_for_display([r for g in groups for r in g.rollouts], k, seed)
    return [(r, [c for c in calls.get(r.id, ()) if c.attempt == r.attempt]) for r in shown]
