"""The infra rate of finished rollouts, per cause (pure): how many of their attempts ended as infrastructure failures.

An infra failure is retried (a fresh chance at reward) and excluded from advantages (its zero never counts), so a
policy that learned to turn its own failures into infra ones would farm them; logged every iteration, the rate shows
as a curve. A rollout's `attempt` is how many times it was claimed; every attempt before the last ended infra (only an
infra failure requeues a rollout), and the last one did when the rollout failed as infra (all its attempts spent: a
failure the trainer never trains on, counted here all the same). The cause of each comes from the rollout's STATE
events (`reason`, an `InfraReason`); an infra attempt without one (a state change made without a reason, or events not
read) counts as `unknown`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from gateway.records import TERMINAL_STATES, Event, EventKind, FailureKind, InfraReason, Rollout, RolloutState

UNKNOWN = "unknown"
"""The cause of an infra attempt whose state change named none."""


def infra_attempts(rollout: Rollout) -> int:
    """How many of a finished rollout's attempts ended as infra failures."""
    earlier = max(rollout.attempt - 1, 0)
    return earlier + (1 if rollout.failure_kind == FailureKind.INFRA and rollout.attempt > 0 else 0)


def needs_events(rollout: Rollout) -> bool:
    """Whether the rollout had an infra attempt, whose cause only its events tell."""
    return infra_attempts(rollout) > 0


def infra_reasons(events: Sequence[Event]) -> list[str]:
    """The causes of a rollout's infra attempts, in order: each STATE event that requeued it or failed it as infra."""
    reasons = []
    for event in events:
        if event.kind != EventKind.STATE:
            continue
        state, kind = event.payload.get("state"), event.payload.get("failure_kind")
        if state == RolloutState.QUEUED or (state == RolloutState.FAILED and kind == FailureKind.INFRA):
            reasons.append(str(event.payload.get("reason") or UNKNOWN))
    return reasons


def infra_metrics(rollouts: Sequence[Rollout], events: Mapping[str, Sequence[Event]],
                  prefix: str = "rollout") -> dict[str, float]:
    """`<prefix>/infra_retry_rate` (infra attempts / attempts of the finished `rollouts`; 0 without attempts),
    `<prefix>/attempts`, `<prefix>/infra_attempts`, `<prefix>/infra_failed` (rollouts failed as infra, all attempts
    spent) and `<prefix>/infra/<reason>` for every `InfraReason` and `unknown`, from the rollouts' STATE `events` by
    rollout id (those `needs_events` names; a missing list makes its infra attempts `unknown`)."""
    finished = [r for r in rollouts if r.state in TERMINAL_STATES]
    attempts = sum(r.attempt for r in finished)
    by_reason: Counter[str] = Counter()
    for rollout in finished:
        count = infra_attempts(rollout)
        known = infra_reasons(events.get(rollout.id, ()))[:count]
        by_reason.update(known)
        by_reason[UNKNOWN] += count - len(known)
    infra = sum(by_reason.values())
    metrics = {f"{prefix}/infra_retry_rate": infra / attempts if attempts else 0.0,
               f"{prefix}/attempts": float(attempts), f"{prefix}/infra_attempts": float(infra),
               f"{prefix}/infra_failed": float(sum(r.failure_kind == FailureKind.INFRA for r in finished))}
    for reason in [*(r.value for r in InfraReason), UNKNOWN, *sorted(set(by_reason) - set(InfraReason) - {UNKNOWN})]:
        metrics[f"{prefix}/infra/{reason}"] = float(by_reason[reason])
    return metrics
