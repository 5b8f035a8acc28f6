"""Rollouts as trace drafts, built purely from gateway records: span order and timing, tool spans for every protocol,
readable stream answers, no token IDs, session, run link and reward feedback."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mlflow.entities import SpanType
from mlflow.tracing.constant import TraceMetadataKey

from gateway.records import CallStatus, FailureKind, RolloutState
from tests.tracking.support import SYSTEM, USER
from tests.trainer.loop_support import call, rollout
from tracking.conversation_tools import chat_stream_tool_calls, tool_exchanges, without_hidden
from tracking.rollout_traces import final_reward_details, train_selection
from tracking.traces import (
    SESSION_METADATA_KEY,
    SOURCE_RUN_METADATA_KEY,
    TraceContext,
    cut,
    rollout_trace,
)

CONTEXT = TraceContext(recipe="swe", run_id="run-1", iteration=3, submitted_version=2)
CHAT_TOOL_CALL = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}

# (protocol, request of call 0, request of call 1): call 1 reports the result of the tool call 0 made
PROTOCOLS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("chat", {"messages": [SYSTEM, USER]},
     {"messages": [SYSTEM, USER, {"role": "assistant", "content": None, "tool_calls": [CHAT_TOOL_CALL]},
                   {"role": "tool", "tool_call_id": "c1", "content": "a.py"}]}),
    ("anthropic", {"messages": [USER]},
     {"messages": [USER, {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "bash",
                                                             "input": {"cmd": "ls"}}]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "a.py"}]}]}),
    ("responses", {"input": [{"role": "user", "content": "Fix the bug."}]},
     {"previous_response_id": "resp_0",
      "input": [{"type": "function_call", "call_id": "c1", "name": "bash", "arguments": '{"cmd": "ls"}'},
                {"type": "function_call_output", "call_id": "c1", "output": "a.py"}]}),
]


def spans_of(draft) -> list[tuple[str, str]]:
    return [(span.name, span.span_type) for span in draft.root.children]


@pytest.mark.parametrize(("protocol", "first", "second"), PROTOCOLS, ids=[p[0] for p in PROTOCOLS])
def test_a_tool_call_and_its_result_become_a_tool_span_between_the_calls(protocol, first, second) -> None:
    calls = [call(seq=1, request=second, created_at=20.0, latency_ms=1000.0),
             call(seq=0, request=first, created_at=10.0, latency_ms=2000.0)]
    draft = rollout_trace(rollout(started_at=9.0, finished_at=25.0), calls, CONTEXT)
    assert spans_of(draft) == [("chat 0", SpanType.CHAT_MODEL), ("tool bash", SpanType.TOOL),
                               ("chat 1", SpanType.CHAT_MODEL)]
    tool = draft.root.children[1]
    assert (tool.start_ns, tool.end_ns) == (12_000_000_000, 20_000_000_000), "from the asking call's end"
    assert (tool.inputs, tool.outputs) == ({"cmd": "ls"}, "a.py")
    assert tool.attributes["tool_call_id"] == "c1"


def test_calls_in_seq_order_with_recorded_times_and_facts() -> None:
    calls = [call(seq=i, created_at=100.0 + i, latency_ms=250.0, version=i // 2, upstream="http://e:1/v1",
                  finish_reason="length" if i == 2 else "stop") for i in (2, 0, 1)]
    calls.append(call(seq=3, kind="count_tokens", side=True, created_at=104.0, latency_ms=5.0))
    draft = rollout_trace(rollout(started_at=99.0, finished_at=106.0, input={"id": "task-7"}), calls, CONTEXT)
    children = draft.root.children
    assert [c.attributes["seq"] for c in children] == [0, 1, 2, 3]
    assert [c.name for c in children] == ["chat 0", "chat 1", "chat 2", "count_tokens 3 (side)"]
    assert children[2].attributes["finish_reason"] == "length" and children[2].attributes["policy_version"] == 1
    assert children[0].attributes["upstream"] == "http://e:1/v1" and children[3].attributes["side"] is True
    assert (children[0].start_ns, children[0].end_ns) == (100_000_000_000, 100_250_000_000)
    assert children[0].attributes["prompt_tokens"] == 3 and children[0].attributes["completion_tokens"] == 1
    root = draft.root
    assert root.span_type == SpanType.AGENT and (root.start_ns, root.end_ns) == (99_000_000_000, 106_000_000_000)
    assert root.attributes | {"duration_s": 7.0} == root.attributes
    assert {k: root.attributes[k] for k in ("task_id", "recipe", "group_id", "attempt", "mode", "policy_versions",
                                            "submitted_version", "iteration", "failure_kind")} == {
        "task_id": "task-7", "recipe": "swe", "group_id": "g1", "attempt": 1, "mode": "train",
        "policy_versions": [0, 1], "submitted_version": 2, "iteration": 3, "failure_kind": None}


def test_only_the_final_attempt_and_only_this_rollout() -> None:
    calls = [call(seq=0, attempt=1), call(seq=0, attempt=2, created_at=5.0), call(seq=1, attempt=2, created_at=6.0)]
    draft = rollout_trace(rollout(attempt=2), calls, CONTEXT)
    assert len(draft.root.children) == 2 and draft.root.attributes["attempt"] == 2
    with pytest.raises(ValueError, match="belongs to rollout 'r2'"):
        rollout_trace(rollout(), [call("r2")], CONTEXT)


def test_no_token_ids_or_logprobs_anywhere() -> None:
    unary = json.dumps({"prompt_token_ids": [1, 2], "choices": [{"message": {"content": "hi"}, "token_ids": [7],
                                                                  "logprobs": {"content": [{"logprob": -1.0}]}}]})
    stream = ('data: {"prompt_token_ids": [1, 2], "choices": [{"index": 0, "delta": {"content": "hi"}, '
              '"token_ids": [7]}]}\n\ndata: [DONE]\n\n')
    calls = [call(seq=0, response_raw=unary), call(seq=1, stream=True, response_raw=stream, response_text="hi")]
    text = json.dumps([(s.inputs, s.outputs, s.attributes) for s in rollout_trace(rollout(), calls, CONTEXT)
                       .root.children])
    assert "token_ids" not in text and "logprob" not in text
    assert '"hi"' in text


def test_a_streamed_chat_answer_is_reassembled() -> None:
    chunks = [{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c9", "function": {
        "name": "bash", "arguments": '{"cmd"'}}]}}]},
              {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ': "ls"}'}}]},
                            "finish_reason": "tool_calls"}]}]
    raw = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    assert chat_stream_tool_calls(raw) == [{"id": "c9", "name": "bash", "arguments": {"cmd": "ls"}}]
    streamed = call(stream=True, response_raw=raw, response_text="", finish_reason="tool_calls")
    answer = rollout_trace(rollout(), [streamed], CONTEXT).root.children[0].outputs
    assert answer["tool_calls"][0]["arguments"] == {"cmd": "ls"} and answer["finish_reason"] == "tool_calls"
    assert answer["stream"].startswith("data: ")


@pytest.mark.parametrize(("request_body", "expected"), [
    ({"messages": [USER]}, []),
    ({"prompt": "6*7="}, []),
    ({"messages": [{"role": "assistant", "tool_calls": [CHAT_TOOL_CALL]}]}, [("c1", "bash", {"cmd": "ls"}, None)]),
    ({"input": "just text"}, []),
    ({"input": [{"type": "function_call", "call_id": "x", "name": "f", "arguments": "not json"}]},
     [("x", "f", "not json", None)]),
])
def test_tool_exchanges_table(request_body, expected) -> None:
    assert [(e.call_id, e.name, e.arguments, e.result) for e in tool_exchanges(request_body)] == expected


def test_tool_results_of_the_first_request_are_context_not_spans() -> None:
    draft = rollout_trace(rollout(), [call(seq=0, request=PROTOCOLS[0][2])], CONTEXT)
    assert spans_of(draft) == [("chat 0", SpanType.CHAT_MODEL)]


def test_session_run_link_tags_and_reward_feedback() -> None:
    assert (SESSION_METADATA_KEY, SOURCE_RUN_METADATA_KEY) == (TraceMetadataKey.TRACE_SESSION,
                                                               TraceMetadataKey.SOURCE_RUN)
    draft = rollout_trace(rollout(reward=0.0, input={"id": "t"}), [call()], CONTEXT,
                          {"tamper": True, "reason": "edited the tests"})
    assert draft.metadata == {SESSION_METADATA_KEY: "g1", SOURCE_RUN_METADATA_KEY: "run-1"}
    assert draft.tags["harnessrl.iteration"] == "3" and draft.tags["harnessrl.task_id"] == "t"
    (feedback,) = draft.feedback
    assert (feedback.name, feedback.value, feedback.rationale) == ("reward", 0.0, "edited the tests")
    assert feedback.metadata["tamper"] == "true" and json.loads(feedback.metadata["details"])["tamper"] is True


def test_a_failed_rollout_without_reward_or_calls() -> None:
    failed = rollout(reward=None, state=RolloutState.FAILED, failure_kind=FailureKind.AGENT, error="crashed",
                     started_at=None, created_at=3.0, finished_at=4.0)
    draft = rollout_trace(failed, [], TraceContext(recipe="if", run_id=None))
    assert draft.feedback == () and draft.root.error and draft.root.children == ()
    assert draft.root.attributes["failure_kind"] == "agent" and draft.root.outputs["error"] == "crashed"
    assert SOURCE_RUN_METADATA_KEY not in draft.metadata and (draft.root.start_ns, draft.root.end_ns) == (
        3_000_000_000, 4_000_000_000)
    error_call = call(status=CallStatus.ERROR, http_status=502, error="upstream closed", response_raw=None)
    span = rollout_trace(rollout(), [error_call], CONTEXT).root.children[0]
    assert span.error and span.attributes["error"] == "upstream closed" and span.outputs is None


def test_long_texts_keep_head_and_tail_and_hidden_keys_go_at_any_depth() -> None:
    assert cut("a" * 10 + "b" * 10, 10) == "aaaaa\n[... 10 chars omitted ...]\nbbbbb"
    assert without_hidden({"x": [{"token_ids": [1], "y": 2}]}) == {"x": [{"y": 2}]}


def test_reward_details_of_the_final_attempt_and_train_selection() -> None:
    from gateway.records import Event, EventKind

    events = [Event(id=i, rollout_id="r1", attempt=attempt, kind=EventKind.REWARD, payload={"details": {"n": i}},
                    created_at=0.0) for i, attempt in ((1, 1), (2, 2), (3, 1))]
    assert final_reward_details(rollout(attempt=2), events) == {"n": 2}
    assert final_reward_details(rollout(attempt=3), events) is None
    from tests.trainer.loop_support import group

    groups = [group("a", [1.0, 0.0, 0.5]), group("b", [0.2, 0.9])]
    picked = train_selection(groups, 2, seed=0)
    assert picked == {"a-0", "a-1"}, "the highest and the lowest reward"
    assert train_selection(groups, 0, seed=0) == set()
