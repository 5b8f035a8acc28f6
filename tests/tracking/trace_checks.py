"""Reading rollout traces back from MLflow and checking them against the gateway's records (tracking and flow tests)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from gateway.records import CallRecord, Rollout
from tracking.mlflow_traces import global_tracking_uri
from tracking.traces import SESSION_METADATA_KEY, SOURCE_RUN_METADATA_KEY, TAG_PREFIX


def run_traces(client, run_id: str) -> list:
    """Every trace of the run (linked by `mlflow.sourceRun`), with spans and assessments. MLflow downloads spans
    kept as `mlflow-artifacts:` through the global tracking URI, so it is the client's while reading."""
    run = client.get_run(run_id)
    traces, token = [], None
    with global_tracking_uri(client.tracking_uri):
        while True:
            page = client.search_traces(locations=[run.info.experiment_id], run_id=run_id, max_results=100,
                                        page_token=token)
            traces += list(page)
            token = page.token
            if not token:
                return traces


def feedback_value(trace, name: str):
    """The value of the trace's feedback `name` (a KeyError naming the ones there when it is missing)."""
    found = {a.name: a for a in trace.info.assessments}
    return found[name].feedback.value


def check_trace(trace, rollout: Rollout, calls: Sequence[CallRecord], run_id: str) -> None:
    """The trace shows `rollout`'s final attempt: a child span per call in seq order (tool spans aside), the reward
    as feedback, the group as the session, the run linked."""
    info = trace.info
    assert info.tags[f"{TAG_PREFIX}rollout_id"] == rollout.id
    assert info.trace_metadata[SESSION_METADATA_KEY] == rollout.group_id
    assert info.trace_metadata[SOURCE_RUN_METADATA_KEY] == run_id
    root = next(span for span in trace.data.spans if span.parent_id is None)
    children = sorted((s for s in trace.data.spans if s.parent_id == root.span_id), key=lambda s: s.start_time_ns)
    call_spans = [s for s in children if s.span_type != "TOOL"]
    final = sorted((c for c in calls if c.attempt == rollout.attempt), key=lambda c: c.seq)
    assert [s.attributes["call_id"] for s in call_spans] == [c.id for c in final], rollout.id
    assert [s.attributes["seq"] for s in call_spans] == [c.seq for c in final]
    assert root.attributes["attempt"] == rollout.attempt and root.attributes["group_id"] == rollout.group_id
    if rollout.reward is not None:
        assert feedback_value(trace, "reward") == rollout.reward
    assert "token_ids" not in trace.to_json()


def check_run_traces(client, run_id: str, records: Callable[[str], tuple[Rollout, Sequence[CallRecord]]]) -> list:
    """Checks every trace of the run against `records(rollout_id)` (the gateway's rollout and calls); returns them."""
    traces = run_traces(client, run_id)
    for trace in traces:
        rollout, calls = records(trace.info.tags[f"{TAG_PREFIX}rollout_id"])
        check_trace(trace, rollout, calls, run_id)
    return traces


def gateway_records(db: Path) -> Callable[[str], tuple[Rollout, list[CallRecord]]]:
    """Reads a finished run's gateway database (`sqlite:///{db}`): a rollout id's rollout and its calls."""
    import asyncio

    from gateway.store import SqlStore

    def records(rollout_id: str) -> tuple[Rollout, list[CallRecord]]:
        store = SqlStore(f"sqlite:///{db}")
        try:
            async def read() -> tuple[Rollout, list[CallRecord]]:
                rollout = await store.get_rollout(rollout_id)
                return rollout, await store.list_calls(rollout_id, rollout.attempt)
            return asyncio.run(read())
        finally:
            store.close()

    return records
