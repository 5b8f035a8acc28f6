"""Writes `tracking.traces.TraceDraft`s to MLflow with their recorded times, then their feedback.

MLflow's tracing API exports through a process-wide tracer bound to the global tracking URI, not to a client's: each
write sets the global URI to the tracker's for its duration (and restores the previous one after, with the
`MLFLOW_TRACKING_URI` variable as it was), with MLflow's synchronous export (`MLFLOW_ENABLE_ASYNC_TRACE_LOGGING`
false for the write, the tracer rebuilt on entry and on exit), so a trace is in the store when its root span ends
and its feedback can follow. Writes are serialised by a lock.

Why synchronous: with MLflow's asynchronous export each trace's export had to be awaited before the next (traces
exported together lost spans: MLflow 3.17, sqlite store and server alike, `get_trace` answered "not fully exported"),
and MLflow's flush waits out its queue's 1 s poll: about 1.1 s a trace whatever its size. The synchronous export
once lost spans too; the cause was ours: a null `mlflow.llm.cost` made MLflow's SQL store drop every call span it
was given span by span (`tracking.traces.call_span` now sets an empty cost). Measured 2026-12-06 on 2 cores, 16
traces a batch, the sqlite store (server store) per batch: 1 call a trace 1.5 s (2.4 s) synchronous against 18.3 s
(18.5 s); 20 calls 8.2 s (15.4 s) against 22.6 s (23.5 s); 60 calls 25.3 s (40.2 s) against 29.8 s (29.6 s): every
span and feedback read back in both modes. Only a server store with traces of more than about 40 calls exports
faster asynchronously. Like switching the URI, rebuilding the tracer resets MLflow's process-wide tracing settings
(`mlflow.tracing.set_destination`, `configure`) to their defaults.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import mlflow
from mlflow.entities import AssessmentSource, AssessmentSourceType, LiveSpan, SpanStatusCode

from tracking.traces import SpanDraft, TraceDraft

ASYNC_EXPORT_VARIABLE = "MLFLOW_ENABLE_ASYNC_TRACE_LOGGING"
"""MLflow's switch between its queued export and exporting each trace as its root span ends."""
FEEDBACK_SOURCE_ID = "harnessrl"
"""The source id of the feedback this module logs (source type CODE: a grader's verdict)."""
_LOCK = threading.Lock()


@contextmanager
def global_tracking_uri(tracking_uri: str) -> Iterator[None]:
    """MLflow's global tracking URI set to `tracking_uri` inside the block, the previous one (and the variable
    MLFLOW_TRACKING_URI) restored after."""
    previous = mlflow.get_tracking_uri()
    with _environment("MLFLOW_TRACKING_URI", os.environ.get("MLFLOW_TRACKING_URI")):
        mlflow.set_tracking_uri(tracking_uri)
        try:
            yield
        finally:
            mlflow.set_tracking_uri(previous)


@contextmanager
def synchronous_export() -> Iterator[None]:
    """MLflow's tracer rebuilt to export each trace as its root span ends (no export queue) inside the block, and
    rebuilt as configured after it."""
    try:
        with _environment(ASYNC_EXPORT_VARIABLE, "false"):
            mlflow.tracing.reset()  # the tracer is built again, reading the variable, at the next span
            yield
    finally:
        mlflow.tracing.reset()


@contextmanager
def _environment(name: str, value: str | None) -> Iterator[None]:
    """The variable `name` set to `value` (None: unset) inside the block, as it was after it."""
    previous = os.environ.get(name)
    _set_variable(name, value)
    try:
        yield
    finally:
        _set_variable(name, previous)


def _set_variable(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _status(draft: SpanDraft) -> str:
    return SpanStatusCode.ERROR if draft.error else SpanStatusCode.OK


def _write_children(parent: LiveSpan, children: tuple[SpanDraft, ...]) -> None:
    for child in children:
        span = mlflow.start_span_no_context(child.name, span_type=child.span_type, parent_span=parent,
                                            inputs=child.inputs, attributes=child.attributes,
                                            start_time_ns=child.start_ns)
        _write_children(span, child.children)
        span.end(outputs=child.outputs, status=_status(child), end_time_ns=child.end_ns)


def _start(draft: TraceDraft, experiment_id: str) -> str:
    root = draft.root
    span = mlflow.start_span_no_context(root.name, span_type=root.span_type, inputs=root.inputs,
                                        attributes=root.attributes, tags=draft.tags, metadata=draft.metadata,
                                        experiment_id=experiment_id, start_time_ns=root.start_ns)
    _write_children(span, root.children)
    span.end(outputs=root.outputs, status=_status(root), end_time_ns=root.end_ns)
    return span.trace_id


def write_traces(tracking_uri: str, experiment_id: str, drafts: Sequence[TraceDraft]) -> list[str]:
    """Logs `drafts` as traces of experiment `experiment_id` at `tracking_uri`, then their feedback; returns the trace
    ids in order."""
    if not drafts:
        return []
    source = AssessmentSource(source_type=AssessmentSourceType.CODE, source_id=FEEDBACK_SOURCE_ID)
    with _LOCK, global_tracking_uri(tracking_uri), synchronous_export():
        trace_ids = [_start(draft, experiment_id) for draft in drafts]
        for trace_id, draft in zip(trace_ids, drafts, strict=True):
            for feedback in draft.feedback:
                mlflow.log_feedback(trace_id=trace_id, name=feedback.name, value=feedback.value, source=source,
                                    rationale=feedback.rationale, metadata=feedback.metadata or None)
    return trace_ids
