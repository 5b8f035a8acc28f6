"""Writes `tracking.traces.TraceDraft`s to MLflow with their recorded times, then their feedback.

MLflow's tracing API exports through a process-wide tracer bound to the global tracking URI, not to a client's: each
write sets the global URI to the tracker's for its duration (and restores the previous one after, with the
`MLFLOW_TRACKING_URI` variable as it was), and waits for MLflow's asynchronous trace export before the feedback is
logged (feedback needs the trace in the store). Writes are serialised by a lock.

Each trace's export is awaited before the next starts: traces exported together lost spans (MLflow 3.17, sqlite
store and server alike: `get_trace` answered "not fully exported"), and so did MLflow's synchronous export. The
wait is MLflow's queue poll, about 1 s per trace, plus about 1 s per batch for the URI switch (measured on 2 busy
cores: 3.1 s for a batch of 2).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import mlflow
from mlflow.entities import AssessmentSource, AssessmentSourceType, LiveSpan, SpanStatusCode

from tracking.traces import SpanDraft, TraceDraft

FEEDBACK_SOURCE_ID = "harnessrl"
"""The source id of the feedback this module logs (source type CODE: a grader's verdict)."""
_LOCK = threading.Lock()


@contextmanager
def global_tracking_uri(tracking_uri: str) -> Iterator[None]:
    """MLflow's global tracking URI set to `tracking_uri` inside the block, the previous one (and the variable
    MLFLOW_TRACKING_URI) restored after."""
    previous_env = os.environ.get("MLFLOW_TRACKING_URI")
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(tracking_uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(previous)
        if previous_env is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = previous_env


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
    ids in order. One call per batch: switching the global URI and waiting for the export cost about a second each."""
    if not drafts:
        return []
    source = AssessmentSource(source_type=AssessmentSourceType.CODE, source_id=FEEDBACK_SOURCE_ID)
    with _LOCK, global_tracking_uri(tracking_uri):
        trace_ids = []
        for draft in drafts:  # one at a time: the spans of a trace exported together with the next one's go missing
            trace_ids.append(_start(draft, experiment_id))
            mlflow.flush_trace_async_logging(terminate=False)
        for trace_id, draft in zip(trace_ids, drafts, strict=True):
            for feedback in draft.feedback:
                mlflow.log_feedback(trace_id=trace_id, name=feedback.name, value=feedback.value, source=source,
                                    rationale=feedback.rationale, metadata=feedback.metadata or None)
    return trace_ids
