"""Groups of rollouts of one task, finished or pending: what the feed hands the trainer and what recipes' metrics read.

A group of n rollouts (one task, n attempts at it) is complete when all n reached a terminal state. Below both the
trainer (which drops too-stale members, `trainer.rollout_groups`) and the recipes (whose hooks read finished groups).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway.records import CallRecord, Event, EventKind, Rollout


def scored_reward(rollout: Rollout, failure_reward: float = 0.0) -> float | None:
    """What a finished rollout counts as in reward metrics: its reward; `failure_reward` for an agent failure without
    one (a harness that timed out or exited non-zero stays the agent's failure, so leaving out what it could not do
    never raises a mean); None for an infrastructure failure (left out, counted apart)."""
    if rollout.failure_kind == "infra":
        return None
    if rollout.reward is not None:
        return float(rollout.reward)
    return failure_reward if rollout.failure_kind == "agent" else None


def graded_tamper(rollout: Rollout, events: Sequence[Event]) -> bool:
    """Whether the last reward of the rollout's final attempt carries the grader's `tamper` flag."""
    rewards = [e for e in events if e.kind == EventKind.REWARD and e.attempt == rollout.attempt]
    return bool(rewards) and (rewards[-1].payload.get("details") or {}).get("tamper") is True


@dataclass(frozen=True)
class FinishedGroup:
    """A complete group: every member rollout reached a terminal state."""

    group_id: str
    """The group's id (shared by its rollouts)."""
    task: dict
    """The task the group attempted."""
    rollouts: tuple[Rollout, ...]
    """The member rollouts, in creation order."""
    calls: dict[str, tuple[CallRecord, ...]]
    """Each member's recorded calls (its final attempt; empty when the feed does not fetch calls), by rollout id."""
    submitted_version: int
    """The trainer's policy version when the group was created."""
    tampered: frozenset[str] = frozenset()
    """Members whose final attempt's grade was flagged `tamper` (the grader caught a reward hack; reward 0)."""


@dataclass
class PendingGroup:
    """A group still waiting for some of its rollouts."""

    group_id: str
    """The group's id."""
    task: dict
    """The task."""
    rollout_ids: tuple[str, ...]
    """Every member's id."""
    submitted_version: int
    """The trainer's policy version at creation."""
    finished: dict[str, Rollout] = field(default_factory=dict)
    """Members that reached a terminal state so far."""

    @property
    def complete(self) -> bool:
        """All members finished."""
        return len(self.finished) == len(self.rollout_ids)
