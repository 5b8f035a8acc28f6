"""Which finished rollouts become MLflow traces, and logging them: calls and reward details read from the gateway.

Training logs a reward-spread sample of each iteration's batch (`tracking.traces.train_per_iteration`), validation
every rollout (`tracking.traces.validation: all`), the SWE-bench evaluation every instance. A group whose calls the
feed did not fetch (validation, evaluation) has them read from the gateway here; the reward's details (and the tamper
flag) come from the rollout's last reward event of its final attempt.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from gateway.client_roles import RecordsClient
from gateway.records import CallRecord, Event, EventKind, Rollout
from tracking.traces import FeedbackDraft, TraceContext, TraceDraft, rollout_trace
from tracking.tracker import Tracker
from tracking.trajectories import sample_for_display
from trainer.rollout_groups import FinishedGroup

log = logging.getLogger(__name__)


def train_selection(groups: Sequence[FinishedGroup], k: int, seed: int) -> set[str]:
    """The ids of up to `k` rollouts of the batch, spread over the reward range (`sample_for_display`)."""
    return {r.id for r in sample_for_display([r for g in groups for r in g.rollouts], k, seed)}


def final_reward_details(rollout: Rollout, events: Sequence[Event]) -> dict[str, Any] | None:
    """The details of the last reward event of the rollout's final attempt (None: no reward was posted)."""
    rewards = [e for e in events if e.kind == EventKind.REWARD and e.attempt == rollout.attempt]
    return dict(rewards[-1].payload.get("details") or {}) if rewards else None


def rollout_calls(client: RecordsClient, group: FinishedGroup, rollout: Rollout) -> Sequence[CallRecord]:
    """The final attempt's calls: the group's when the feed fetched them, else read from the gateway."""
    return group.calls.get(rollout.id) or client.calls(rollout.id, attempt=rollout.attempt)


def log_rollout_traces(tracker: Tracker, client: RecordsClient, groups: Sequence[FinishedGroup], recipe: str,
                       iteration: int | None, only: Collection[str] | None = None,
                       extra_feedback: Mapping[str, Sequence[FeedbackDraft]] | None = None,
                       extra_tags: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, str]:
    """Logs a trace per rollout of `groups` (only those in `only` when given) in the tracker's run; returns the trace
    id of each rollout id. `extra_feedback` / `extra_tags` add assessments / tags by rollout id. A trace that cannot
    be built or written is reported in the log and left out: traces never stop a run."""
    drafts: dict[str, TraceDraft] = {}
    for group in groups:
        for rollout in group.rollouts:
            if only is not None and rollout.id not in only:
                continue
            context = TraceContext(recipe=str(group.task.get("recipe", recipe)), run_id=tracker.run_id,
                                   iteration=iteration, submitted_version=group.submitted_version,
                                   extra_tags=dict((extra_tags or {}).get(rollout.id, {})))
            try:
                details = final_reward_details(rollout, client.list_events(rollout.id))
                draft = rollout_trace(rollout, rollout_calls(client, group, rollout), context, details)
            except Exception as error:  # noqa: BLE001 - a trace is for people; the run goes on without it
                log.warning("could not read rollout %s for its trace: %s: %s", rollout.id, type(error).__name__,
                            error)
                continue
            more = tuple((extra_feedback or {}).get(rollout.id, ()))
            drafts[rollout.id] = replace(draft, feedback=draft.feedback + more)
    try:
        return dict(zip(drafts, tracker.log_traces(list(drafts.values())), strict=True))
    except Exception as error:  # noqa: BLE001
        log.warning("could not log the traces of %d rollouts: %s: %s", len(drafts), type(error).__name__, error)
        return {}
