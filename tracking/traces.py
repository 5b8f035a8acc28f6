"""A rollout as an MLflow trace, built purely from the gateway's records: a span tree, tags, metadata and feedback.

The root span (type AGENT) is the rollout's final attempt: the task input, the outcome, and its facts as attributes
(task id, recipe, group, attempt, mode, policy versions, duration, failure kind). Under it, in the order things
happened: a span per recorded call in `seq` order (CHAT_MODEL for a conversation, LLM for a completion prompt; the
request as the harness sent it, the answer as it saw it, token counts, latency, finish reason, policy version,
upstream, side flag) and a TOOL span for each tool call whose result first appears in a call's request (between the
call that asked for it and the call that reported it). Times are the recorded ones (`created_at`, `latency_ms`).
The group id is the trace's session; the reward, the grader's details and the tamper flag are feedback on the
trace. Token IDs and logprobs stay in the gateway's store. Writing a draft to MLflow is `tracking.mlflow_traces`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.records import CallRecord, CallStatus, Rollout, RolloutState
from tracking.conversation_tools import readable_answer, tool_exchanges, without_hidden

SESSION_METADATA_KEY = "mlflow.trace.session"
"""MLflow's trace metadata key of a trace's session (mlflow.tracing.constant.TraceMetadataKey.TRACE_SESSION)."""
SOURCE_RUN_METADATA_KEY = "mlflow.sourceRun"
"""MLflow's trace metadata key of the run a trace belongs to (TraceMetadataKey.SOURCE_RUN)."""
TAG_PREFIX = "harnessrl."
"""Prefix of the trace tags this module sets (searchable: `tags.harnessrl.group_id = '...'`)."""
MAX_TEXT_CHARS = 20_000
"""Longest string kept in a span's inputs or outputs (a long conversation keeps its head and tail)."""


@dataclass(frozen=True)
class SpanDraft:
    """One span to write: what MLflow's span API takes, with the recorded times."""

    name: str
    span_type: str
    """AGENT, CHAT_MODEL, LLM or TOOL (mlflow.entities.SpanType's values)."""
    start_ns: int
    end_ns: int
    inputs: Any
    outputs: Any
    attributes: dict[str, Any]
    error: bool = False
    """The span's status: ERROR when True, else OK."""
    children: tuple[SpanDraft, ...] = ()


@dataclass(frozen=True)
class FeedbackDraft:
    """One assessment (MLflow feedback) on the trace."""

    name: str
    value: float | bool | str
    rationale: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TraceDraft:
    """A whole trace: the root span with its children, trace tags and metadata, feedback."""

    root: SpanDraft
    tags: dict[str, str]
    metadata: dict[str, str]
    feedback: tuple[FeedbackDraft, ...]


@dataclass(frozen=True)
class TraceContext:
    """What the flow knows about a rollout beyond the gateway's records."""

    recipe: str
    """The recipe the rollout ran."""
    run_id: str | None
    """The MLflow run the trace belongs to (its `mlflow.sourceRun`)."""
    iteration: int | None = None
    """Training iteration (the validation's step for val rollouts); None outside training."""
    submitted_version: int | None = None
    """The trainer's policy version when the group was created."""
    extra_tags: Mapping[str, str] = field(default_factory=dict)
    """More trace tags (e.g. the evaluated instance)."""


def cut(value: Any, max_chars: int = MAX_TEXT_CHARS) -> Any:
    """`value` with every string longer than `max_chars` cut in the middle (head and tail kept), at any depth."""
    if isinstance(value, str) and len(value) > max_chars:
        head = max_chars // 2
        return f"{value[:head]}\n[... {len(value) - max_chars} chars omitted ...]\n{value[len(value) - head:]}"
    if isinstance(value, dict):
        return {key: cut(item, max_chars) for key, item in value.items()}
    if isinstance(value, list):
        return [cut(item, max_chars) for item in value]
    return value


def ns(seconds: float) -> int:
    """Unix seconds as integer nanoseconds."""
    return int(round(seconds * 1e9))


def call_end_s(call: CallRecord) -> float:
    """When the call's answer was complete, unix seconds."""
    return call.created_at + call.latency_ms / 1000.0


def call_span_type(call: CallRecord) -> str:
    """CHAT_MODEL for a conversation (chat, Messages, Responses), LLM for a completion prompt."""
    return "LLM" if call.kind == "completion" else "CHAT_MODEL"


def call_span(call: CallRecord, max_chars: int) -> SpanDraft:
    """One recorded call as a span: request in, answer out, the call's facts as attributes (no token IDs)."""
    prompt_tokens, completion_tokens = len(call.prompt_token_ids), len(call.response_token_ids)
    attributes = {
        "call_id": call.id, "seq": call.seq, "kind": call.kind, "stream": call.stream, "model": call.model,
        "upstream": call.upstream, "status": str(call.status), "http_status": call.http_status,
        "finish_reason": call.finish_reason, "policy_version": call.policy_version, "latency_ms": call.latency_ms,
        "side": call.side, "n_choices": call.n_choices, "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens, "response_id": call.response_id,
        "mlflow.chat.tokenUsage": {"input_tokens": prompt_tokens, "output_tokens": completion_tokens,
                                   "total_tokens": prompt_tokens + completion_tokens},
        # A cost present, so MLflow looks no price up (litellm's table, fetched from the network), and an object:
        # MLflow's SQL store (3.17.2) dropped a call span whose cost was null.
        "mlflow.llm.model": call.model, "mlflow.llm.cost": {},
    }
    if call.error:
        attributes["error"] = cut(call.error, max_chars)
    outputs = readable_answer(call.kind, call.stream, call.response_raw, call.response_text, call.finish_reason,
                              max_chars)
    name = f"{call.kind} {call.seq}" + (" (side)" if call.side else "")
    return SpanDraft(name=name, span_type=call_span_type(call), start_ns=ns(call.created_at),
                     end_ns=ns(call_end_s(call)), inputs=cut(without_hidden(call.request), max_chars),
                     outputs=cut(outputs, max_chars), attributes=attributes, error=call.status == CallStatus.ERROR)


def call_and_tool_spans(calls: Sequence[CallRecord], max_chars: int) -> list[SpanDraft]:
    """The calls in seq order, each preceded by TOOL spans of the tool results its request reports first.

    A tool span runs from the end of the previous (non-side) call, which asked for the tool, to the start of the
    call that reports its result. Tool calls already in the first call's request are context the harness started
    with, not spans. Side calls (token counts, titles) neither report nor hide tool results.
    """
    spans: list[SpanDraft] = []
    seen: set[str] = set()
    previous: CallRecord | None = None
    for call in sorted(calls, key=lambda c: c.seq):
        if not call.side:
            exchanges = [e for e in tool_exchanges(call.request) if e.result is not None and e.call_id not in seen]
            seen.update(e.call_id for e in exchanges)
            if previous is not None:
                start_s = min(call_end_s(previous), call.created_at)
                spans += [SpanDraft(name=f"tool {e.name}", span_type="TOOL", start_ns=ns(start_s),
                                    end_ns=ns(call.created_at), inputs=cut(e.arguments, max_chars),
                                    outputs=cut(e.result, max_chars),
                                    attributes={"tool_name": e.name, "tool_call_id": e.call_id,
                                                "reported_in_seq": call.seq}) for e in exchanges]
            previous = call
        spans.append(call_span(call, max_chars))
    return spans


def rollout_times(rollout: Rollout, calls: Sequence[CallRecord]) -> tuple[float, float]:
    """The final attempt's start and end, unix seconds: its claim and its finish, widened to cover its calls."""
    starts = [s for s in (rollout.started_at, *(c.created_at for c in calls)) if s is not None]
    start_s = min(starts) if starts else rollout.created_at
    ends = [e for e in (rollout.finished_at, *(call_end_s(c) for c in calls)) if e is not None]
    return start_s, max([start_s, *ends])


def root_span(rollout: Rollout, calls: Sequence[CallRecord], context: TraceContext, children: list[SpanDraft],
              max_chars: int) -> SpanDraft:
    """The rollout's span: task input in, outcome out, its facts as attributes."""
    start_s, end_s = rollout_times(rollout, calls)
    versions = sorted({c.policy_version for c in calls if c.policy_version is not None})
    attributes = {
        "rollout_id": rollout.id, "task_id": str(rollout.input.get("id", "")), "recipe": context.recipe,
        "group_id": rollout.group_id, "attempt": rollout.attempt, "mode": str(rollout.mode),
        "state": str(rollout.state), "policy_versions": versions, "submitted_version": context.submitted_version,
        "iteration": context.iteration, "duration_s": round(end_s - start_s, 3), "n_calls": len(calls),
        "failure_kind": str(rollout.failure_kind) if rollout.failure_kind is not None else None,
    }
    outputs = {"state": str(rollout.state), "reward": rollout.reward,
               "error": cut(rollout.error, max_chars) if rollout.error else None}
    return SpanDraft(name=f"rollout {rollout.id}", span_type="AGENT", start_ns=ns(start_s), end_ns=ns(end_s),
                     inputs=cut(without_hidden(rollout.input), max_chars), outputs=outputs, attributes=attributes,
                     error=rollout.state == RolloutState.FAILED, children=tuple(children))


def reward_feedback(rollout: Rollout, details: Mapping[str, Any] | None) -> tuple[FeedbackDraft, ...]:
    """The grader's reward as feedback `reward` (its details and tamper flag as metadata); none without a reward."""
    if rollout.reward is None:
        return ()
    details = dict(details or {})
    metadata = {"tamper": str(details.get("tamper") is True).lower(),
                "details": json.dumps(cut(details, 4000), default=str, sort_keys=True)}
    return (FeedbackDraft("reward", float(rollout.reward), rationale=str(details.get("reason") or "") or None,
                          metadata=metadata),)


def rollout_trace(rollout: Rollout, calls: Sequence[CallRecord], context: TraceContext,
                  reward_details: Mapping[str, Any] | None = None, max_chars: int = MAX_TEXT_CHARS) -> TraceDraft:
    """The trace of `rollout`'s final attempt from its recorded `calls` (other attempts' calls are left out)."""
    final = sorted((c for c in calls if c.attempt == rollout.attempt), key=lambda c: c.seq)
    for call in final:
        if call.rollout_id != rollout.id:
            raise ValueError(f"call {call.id} belongs to rollout {call.rollout_id!r}, not {rollout.id!r}; pass only "
                             "the calls of this rollout")
    root = root_span(rollout, final, context, call_and_tool_spans(final, max_chars), max_chars)
    tags = {f"{TAG_PREFIX}rollout_id": rollout.id, f"{TAG_PREFIX}group_id": rollout.group_id,
            f"{TAG_PREFIX}task_id": str(rollout.input.get("id", "")), f"{TAG_PREFIX}mode": str(rollout.mode),
            f"{TAG_PREFIX}recipe": context.recipe, f"{TAG_PREFIX}state": str(rollout.state),
            **({f"{TAG_PREFIX}iteration": str(context.iteration)} if context.iteration is not None else {}),
            **context.extra_tags}
    metadata = {SESSION_METADATA_KEY: rollout.group_id,
                **({SOURCE_RUN_METADATA_KEY: context.run_id} if context.run_id else {})}
    return TraceDraft(root=root, tags=tags, metadata=metadata, feedback=reward_feedback(rollout, reward_details))
