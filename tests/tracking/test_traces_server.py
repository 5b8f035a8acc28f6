"""Rollout traces written to a real `mlflow server` read back: spans per call in order, tool spans, recorded times,
the session, the run link, the reward (details, tamper flag) as feedback, a selection of the batch only."""

from __future__ import annotations

import json
import os
import uuid

import mlflow
import pytest
from mlflow import MlflowClient

from tests.services import MlflowServerProcess
from tests.tracking.support import SYSTEM, USER
from tests.tracking.trace_checks import check_run_traces, feedback_value, run_traces
from tests.trainer.loop_support import FakeGateway, call, group, rollout
from tracking.mlflow_traces import ASYNC_EXPORT_VARIABLE
from tracking.mlflow_tracker import MlflowTracker
from tracking.rollout_traces import log_rollout_traces
from trainer.rollout_groups import FinishedGroup

pytestmark = pytest.mark.slow
TOOL_CALL = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}


def tool_group() -> tuple[FinishedGroup, FakeGateway]:
    """A group of two: one member calls a tool and is flagged tamper; its calls only on the gateway (as validation)."""
    gateway = FakeGateway()
    history = [SYSTEM, USER, {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
               {"role": "tool", "tool_call_id": "c1", "content": "a.py"}]
    gateway.call_log["v-0"] = [call("v-0", 0, messages=[SYSTEM, USER], created_at=1000.0, latency_ms=400.0),
                               call("v-0", 1, messages=history, created_at=1001.0, latency_ms=300.0, version=1)]
    gateway.call_log["v-1"] = [call("v-1", 0, created_at=1000.0)]
    gateway.event_log["v-0"] = []
    members = (rollout("v-0", "g-val", 0.0, started_at=999.0, finished_at=1002.0, input={"id": "task-1"}),
               rollout("v-1", "g-val", 1.0, started_at=999.0, finished_at=1001.0, input={"id": "task-1"}))
    from gateway.records import Event, EventKind

    gateway.event_log["v-0"] = [Event(id=1, rollout_id="v-0", attempt=1, kind=EventKind.REWARD, created_at=0.0,
                                      payload={"reward": 0.0, "details": {"tamper": True, "reason": "edited tests"}})]
    return FinishedGroup("g-val", {"id": "task-1"}, members, {"v-0": (), "v-1": ()}, 1), gateway


def test_traces_read_back_from_the_server(mlflow_server: MlflowServerProcess) -> None:
    tracker = MlflowTracker(mlflow_server.url, f"traces-{uuid.uuid4().hex[:8]}", "run-traces")
    val_group, gateway = tool_group()
    logged = log_rollout_traces(tracker, gateway, [val_group], "swe", iteration=0)
    train = [group("g-a", [1.0, 0.0, 0.5]), group("g-b", [0.25])]
    logged |= log_rollout_traces(tracker, gateway, train, "swe", iteration=1, only={"g-a-0", "g-a-1"})
    tracker.end()
    assert set(logged) == {"v-0", "v-1", "g-a-0", "g-a-1"}, "every validation rollout, the selected train ones"

    client = MlflowClient(mlflow_server.url)
    by_rollout = {r.id: (r, gateway.call_log.get(r.id) or list(g.calls[r.id]))
                  for g in [val_group, *train] for r in g.rollouts}
    traces = check_run_traces(client, tracker.run_id, by_rollout.__getitem__)
    assert len(traces) == 4, sorted(t.info.tags["harnessrl.rollout_id"] for t in traces)
    tool_trace = next(t for t in traces if t.info.tags["harnessrl.rollout_id"] == "v-0")
    spans = sorted(tool_trace.data.spans, key=lambda s: (s.parent_id is not None, s.start_time_ns))
    assert [(s.name, s.span_type) for s in spans] == [
        ("rollout v-0", "AGENT"), ("chat 0", "CHAT_MODEL"), ("tool bash", "TOOL"), ("chat 1", "CHAT_MODEL")]
    assert spans[0].start_time_ns == 999_000_000_000 and spans[0].end_time_ns == 1_002_000_000_000
    assert spans[2].inputs == {"cmd": "ls"} and spans[2].outputs == "a.py"
    assert spans[3].inputs["messages"][-1]["content"] == "a.py" and spans[3].attributes["policy_version"] == 1
    assert feedback_value(tool_trace, "reward") == 0.0
    reward = next(a for a in tool_trace.info.assessments if a.name == "reward")
    assert reward.metadata["tamper"] == "true" and json.loads(reward.metadata["details"])["reason"] == "edited tests"
    sessions = {t.info.tags["harnessrl.rollout_id"]: t.info.trace_metadata["mlflow.trace.session"] for t in traces}
    assert sessions == {"v-0": "g-val", "v-1": "g-val", "g-a-0": "g-a", "g-a-1": "g-a"}
    assert len(run_traces(client, tracker.run_id)) == 4


def test_a_batch_of_long_rollouts_reads_back_whole_and_mlflow_is_left_as_it_was(
        mlflow_server: MlflowServerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    """Twelve rollouts of eight calls in one write: every span and reward of each (the spans of traces exported
    together went missing with MLflow's queued export), and the process's tracking URI, its variable and the
    caller's export setting as they were before the write."""
    monkeypatch.setenv(ASYNC_EXPORT_VARIABLE, "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    before = mlflow.get_tracking_uri()
    tracker = MlflowTracker(mlflow_server.url, f"traces-{uuid.uuid4().hex[:8]}", "run-long")
    gateway = FakeGateway()
    eight_calls = {"versions": {f"g-long-{i}": range(8) for i in range(12)}}
    batch = [group("g-long", [float(i % 2) for i in range(12)], **eight_calls)]
    logged = log_rollout_traces(tracker, gateway, batch, "swe", iteration=1)
    tracker.end()
    assert len(logged) == 12
    assert mlflow.get_tracking_uri() == before and "MLFLOW_TRACKING_URI" not in os.environ
    assert os.environ[ASYNC_EXPORT_VARIABLE] == "true"

    client = MlflowClient(mlflow_server.url)
    by_rollout = {r.id: (r, list(g.calls[r.id])) for g in batch for r in g.rollouts}
    traces = check_run_traces(client, tracker.run_id, by_rollout.__getitem__)
    assert len(traces) == 12
    assert {len(t.data.spans) for t in traces} == {9}, "the root and a span per call, in every trace"
    assert sorted(feedback_value(t, "reward") for t in traces) == [0.0] * 6 + [1.0] * 6
