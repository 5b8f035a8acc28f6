"""Trajectories for humans: final attempt's last call + answer, truncation, markdown, JSON, reward-spread sampling."""

from __future__ import annotations

import json

import pytest

from gateway.records import CallStatus, FailureKind, Rollout, RolloutState
from tests.tracking.support import SYSTEM, USER
from tests.trainer.loop_support import call, rollout
from tracking.trajectories import (
    Message,
    render_trajectories,
    sample_for_display,
    to_trajectory,
    trajectories_json,
    truncate_middle,
)


def test_last_call_of_the_final_attempt_and_its_answer() -> None:
    calls = [
        call(seq=0, messages=[SYSTEM, USER], response_text="old attempt", attempt=1),
        call(seq=1, messages=[SYSTEM, USER], response_text="first", attempt=2),
        call(seq=0, messages=[SYSTEM, USER], response_text="zeroth", attempt=2),
        call(seq=2, messages=[SYSTEM, USER, {"role": "assistant", "content": "first"},
                              {"role": "user", "content": [{"type": "text", "text": "output: 3"},
                                                           {"type": "image_url", "image_url": {"url": "x"}}]}],
             response_text="done", attempt=2),
    ]
    trajectory = to_trajectory(rollout(attempt=2), calls)
    assert trajectory.n_calls == 3 and trajectory.attempt == 2
    assert [(m.role, m.content) for m in trajectory.messages] == [
        ("system", "You solve tasks."), ("user", "Fix the bug."), ("assistant", "first"),
        ("user", "output: 3\n[image_url]"), ("answer", "done")]


def test_tool_calls_in_history_and_in_a_non_streamed_answer() -> None:
    tool_call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}
    history = [USER, {"role": "assistant", "content": None, "tool_calls": [tool_call]},
               {"role": "tool", "tool_call_id": "c1", "content": "a.py"}]
    raw = json.dumps({"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [tool_call]}}]})
    answered = call(messages=history, response_text=None, response_raw=raw, finish_reason="tool_calls")
    messages = to_trajectory(rollout(), [answered]).messages
    assert messages[1].content == '[tool call] bash({"cmd": "ls"})'
    assert messages[2] == Message("tool", "a.py")
    assert messages[3].content == '[tool call] bash({"cmd": "ls"})'
    streamed = call(messages=[USER], response_text=None, stream=True, response_raw="data: {}",
                    finish_reason="tool_calls")
    assert to_trajectory(rollout(), [streamed]).messages[-1].content == "[no text; finish_reason=tool_calls]"


def test_error_call_completion_prompt_and_no_calls() -> None:
    error_call = call(messages=[USER], response_text=None, status=CallStatus.ERROR, http_status=502,
                      error="upstream closed")
    assert to_trajectory(rollout(), [error_call]).messages[-1].content == "HTTP 502: upstream closed"
    completion = call(response_text="42", kind="completion", request={"model": "tiny", "prompt": "6*7="})
    assert [(m.role, m.content) for m in to_trajectory(rollout(), [completion]).messages] == [
        ("prompt", "6*7="), ("answer", "42")]
    failed = rollout(reward=None, state=RolloutState.FAILED, failure_kind=FailureKind.INFRA,
                     error="image pull failed")
    trajectory = to_trajectory(failed, [])
    assert trajectory.messages == () and trajectory.failure_kind == "infra" and trajectory.state == "failed"
    markdown = render_trajectories([(failed, [])])
    assert "reward none (failed)" in markdown and "failure: infra" in markdown and "image pull failed" in markdown
    assert "_no calls recorded in this attempt_" in markdown


def test_calls_of_another_rollout_are_refused() -> None:
    with pytest.raises(ValueError, match="belongs to rollout 'r2'"):
        to_trajectory(rollout(), [call("r2", messages=[USER])])


def test_long_messages_keep_head_and_tail() -> None:
    text = "HEAD" + "x" * 5000 + "TAIL"
    cut = truncate_middle(text, 100)
    assert cut.startswith("HEAD") and cut.endswith("TAIL") and "[... 4908 chars omitted ...]" in cut
    assert truncate_middle("short", 100) == "short"
    trajectory = to_trajectory(rollout(), [call(messages=[{"role": "user", "content": text}], response_text=text)],
                               max_chars_per_message=100)
    assert all(len(m.content) < 200 for m in trajectory.messages)


def test_markdown_fences_survive_backticks_and_json_round_trips() -> None:
    answer = "```python\nprint(1)\n```"
    items = [(rollout("r1", reward=1.0), [call("r1", messages=[SYSTEM, USER], response_text=answer)]),
             (rollout("r2", reward=0.0), [call("r2", messages=[USER], response_text="no idea")])]
    markdown = render_trajectories(items)
    assert markdown.startswith("# Trajectories\n")
    assert "## `r1`: reward 1 (succeeded)" in markdown and "## `r2`: reward 0 (succeeded)" in markdown
    assert f"````text\n{answer}\n````" in markdown
    assert "**system**\n\n```text\nYou solve tasks.\n```" in markdown
    data = trajectories_json(items)
    assert json.loads(json.dumps(data)) == data
    assert data[0]["rollout_id"] == "r1" and data[0]["reward"] == 1.0 and data[0]["group_id"] == "g1"
    assert data[0]["messages"][-1] == {"role": "answer", "content": answer}
    assert render_trajectories([]) == "# Trajectories\n\n_none_\n"


def rollouts_with(rewards: list[float | None]) -> list[Rollout]:
    return [rollout(f"r{i}", reward=reward) for i, reward in enumerate(rewards)]


def test_sample_shows_both_ends_of_the_reward_range() -> None:
    rollouts = rollouts_with([0.5, 0.1, 0.9, 0.3, 0.7, None])
    assert [r.reward for r in sample_for_display(rollouts, 2, seed=0)] == [0.9, 0.1]
    assert [r.reward for r in sample_for_display(rollouts, 4, seed=0)] == [0.9, 0.7, 0.3, 0.1]
    assert [r.reward for r in sample_for_display(rollouts, 6, seed=0)] == [0.9, 0.7, 0.5, 0.3, 0.1, None]
    assert [r.reward for r in sample_for_display(rollouts, 60, seed=0)] == [0.9, 0.7, 0.5, 0.3, 0.1, None]
    assert sample_for_display(rollouts, 0, seed=0) == []
    with pytest.raises(ValueError, match="k=-1"):
        sample_for_display(rollouts, -1, seed=0)


def test_sample_is_deterministic_and_the_seed_picks_among_ties() -> None:
    rollouts = rollouts_with([1.0] * 10 + [0.0] * 10)
    first = [r.id for r in sample_for_display(rollouts, 4, seed=1)]
    assert first == [r.id for r in sample_for_display(list(rollouts), 4, seed=1)]
    assert [r.reward for r in sample_for_display(rollouts, 4, seed=1)] == [1.0, 1.0, 0.0, 0.0]
    picks = {tuple(r.id for r in sample_for_display(rollouts, 4, seed=seed)) for seed in range(10)}
    assert len(picks) > 1
