"""Finished rollouts rendered for humans: a reward-spread sample, each as its last call's conversation plus the answer.

The conversation is the final attempt's last call: the request messages the harness sent (its own context) and the
first choice's text. Long texts keep their head and tail.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gateway.records import CallRecord, CallStatus, Rollout
from tracking.tracker import Tracker


@dataclass(frozen=True)
class Message:
    """One turn of a displayed conversation."""

    role: str
    """system, user, assistant, tool, prompt (completions), answer, or error."""
    content: str
    """The text, truncated."""


@dataclass(frozen=True)
class Trajectory:
    """One rollout as shown to a human."""

    rollout_id: str
    """Rollout id."""
    group_id: str
    """Group id."""
    reward: float | None
    """Grader's reward; None when none was posted."""
    state: str
    """Final rollout state."""
    failure_kind: str | None
    """agent or infra when failed."""
    error: str | None
    """Failure reason, truncated."""
    attempt: int
    """The attempt shown."""
    n_calls: int
    """Calls of that attempt."""
    messages: tuple[Message, ...]
    """The last call's request messages, then its answer (or error)."""


def truncate_middle(text: str, max_chars: int) -> str:
    """`text` with its middle replaced by a marker when longer than `max_chars` (head and tail kept)."""
    if len(text) <= max_chars:
        return text
    head = max_chars // 2
    tail = max_chars - head
    return f"{text[:head]}\n[... {len(text) - max_chars} chars omitted ...]\n{text[len(text) - tail:]}"


def content_text(content: Any) -> str:
    """OpenAI message content (a string, a list of parts, or None) as plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict):
                parts.append(f"[{part.get('type', 'part')}]")
            else:
                parts.append(str(part))
        return "\n".join(parts)
    return json.dumps(content, default=str)


def tool_calls_text(tool_calls: Any) -> str:
    """Assistant tool calls as `name(arguments)` lines."""
    lines = []
    for call in tool_calls or ():
        function = call.get("function", {}) if isinstance(call, dict) else {}
        lines.append(f"[tool call] {function.get('name', '?')}({function.get('arguments', '')})")
    return "\n".join(lines)


def request_messages(request: dict[str, Any], max_chars: int) -> list[Message]:
    """The conversation a harness sent: chat `messages`, or a completion `prompt`."""
    if "messages" in request:
        shown = []
        for message in request["messages"] or ():
            if not isinstance(message, dict):
                shown.append(Message("unknown", truncate_middle(str(message), max_chars)))
                continue
            text = "\n".join(t for t in (content_text(message.get("content")),
                                         tool_calls_text(message.get("tool_calls"))) if t)
            shown.append(Message(str(message.get("role", "unknown")), truncate_middle(text, max_chars)))
        return shown
    prompt = request.get("prompt")
    prompt_text = prompt if isinstance(prompt, str) else json.dumps(prompt, default=str)
    return [Message("prompt", truncate_middle(prompt_text, max_chars))]


def answer_message(call: CallRecord, max_chars: int) -> Message:
    """The call's answer: its text, its tool calls (non-streamed), or its error."""
    if call.status == CallStatus.ERROR:
        return Message("error", truncate_middle(f"HTTP {call.http_status}: {call.error or ''}", max_chars))
    text = call.response_text or ""
    if not text and call.response_raw and not call.stream:
        try:
            choices = json.loads(call.response_raw).get("choices") or [{}]
            text = tool_calls_text((choices[0].get("message") or {}).get("tool_calls"))
        except (ValueError, AttributeError, TypeError):
            text = ""
    if not text:
        text = f"[no text; finish_reason={call.finish_reason}]"
    return Message("answer", truncate_middle(text, max_chars))


def to_trajectory(rollout: Rollout, calls: Iterable[CallRecord], max_chars_per_message: int = 2000) -> Trajectory:
    """`rollout` and its call records (any attempts) → the displayed trajectory of its final attempt."""
    calls = list(calls)
    for call in calls:
        if call.rollout_id != rollout.id:
            raise ValueError(f"call {call.id} belongs to rollout {call.rollout_id!r}, not {rollout.id!r}; "
                             "pass only the calls of this rollout")
    final = sorted((call for call in calls if call.attempt == rollout.attempt), key=lambda call: call.seq)
    messages: list[Message] = []
    if final:
        messages = [*request_messages(final[-1].request, max_chars_per_message),
                    answer_message(final[-1], max_chars_per_message)]
    return Trajectory(
        rollout_id=rollout.id, group_id=rollout.group_id, reward=rollout.reward, state=str(rollout.state),
        failure_kind=str(rollout.failure_kind) if rollout.failure_kind is not None else None,
        error=truncate_middle(rollout.error, max_chars_per_message) if rollout.error else None,
        attempt=rollout.attempt, n_calls=len(final), messages=tuple(messages))


def sample_for_display(rollouts: Sequence[Rollout], k: int, seed: int) -> list[Rollout]:
    """Up to `k` rollouts spread over the reward range: highest and lowest alternately, then unrewarded ones.

    Ties are broken by a shuffle seeded with `seed`, so equal rewards (0/1 graders) show different rollouts at
    different seeds but the same ones at the same seed. The result is ordered by reward, highest first.
    """
    if k < 0:
        raise ValueError(f"k={k} must be >= 0")
    shuffled = list(rollouts)
    random.Random(seed).shuffle(shuffled)
    rewarded = sorted((r for r in shuffled if r.reward is not None), key=lambda r: -r.reward)
    unrewarded = [r for r in shuffled if r.reward is None]
    picked: list[Rollout] = []
    low, high = len(rewarded) - 1, 0
    while len(picked) < k and high <= low:
        picked.append(rewarded[high])
        high += 1
        if len(picked) < k and high <= low:
            picked.append(rewarded[low])
            low -= 1
    picked.sort(key=lambda r: -r.reward)
    return picked + unrewarded[: k - len(picked)]


def trajectories_json(items: Iterable[tuple[Rollout, Sequence[CallRecord]]],
                      max_chars_per_message: int = 2000) -> list[dict[str, Any]]:
    """(rollout, calls) pairs → JSON-able dicts (the fields of `Trajectory`, messages as role/content dicts)."""
    return [trajectory_dict(to_trajectory(rollout, calls, max_chars_per_message)) for rollout, calls in items]


def trajectory_dict(trajectory: Trajectory) -> dict[str, Any]:
    """A trajectory as plain JSON types."""
    return {**asdict(trajectory), "messages": [asdict(message) for message in trajectory.messages]}


def fence(text: str) -> str:
    """`text` in a markdown code fence longer than any backtick run inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}text\n{text}\n{ticks}"


def trajectory_markdown(trajectory: Trajectory) -> str:
    """One trajectory as a markdown section."""
    reward = "none" if trajectory.reward is None else f"{trajectory.reward:g}"
    lines = [f"## `{trajectory.rollout_id}`: reward {reward} ({trajectory.state})",
             f"group `{trajectory.group_id}`, attempt {trajectory.attempt}, {trajectory.n_calls} calls"]
    if trajectory.failure_kind or trajectory.error:
        lines.append(f"failure: {trajectory.failure_kind or 'unknown'}")
        if trajectory.error:
            lines.append(fence(trajectory.error))
    if not trajectory.messages:
        lines.append("_no calls recorded in this attempt_")
    for message in trajectory.messages:
        lines += [f"**{message.role}**", fence(message.content)]
    return "\n\n".join(lines)


def render_trajectories(items: Iterable[tuple[Rollout, Sequence[CallRecord]]],
                        max_chars_per_message: int = 2000) -> str:
    """(rollout, calls) pairs → one markdown document, a section per rollout."""
    sections = [trajectory_markdown(to_trajectory(rollout, calls, max_chars_per_message)) for rollout, calls in items]
    return "\n\n".join(["# Trajectories", *sections]) + "\n" if sections else "# Trajectories\n\n_none_\n"


def trajectory_artifact_file(step: int, mode: str = "train", suffix: str = "md") -> str:
    """Where step `step`'s rendered trajectories go: `trajectories/{mode}/step-{step:06d}.{suffix}`."""
    return f"trajectories/{mode}/step-{int(step):06d}.{suffix}"


def log_trajectories(tracker: Tracker, items: Iterable[tuple[Rollout, Sequence[CallRecord]]], step: int,
                     mode: str = "train", max_chars_per_message: int = 2000) -> list[str]:
    """Log rendered trajectories as markdown and JSON artifacts of step `step`; returns the two artifact paths."""
    items = list(items)
    markdown_file = trajectory_artifact_file(step, mode, "md")
    json_file = trajectory_artifact_file(step, mode, "json")
    tracker.log_text(render_trajectories(items, max_chars_per_message), markdown_file)
    tracker.log_dict(trajectories_json(items, max_chars_per_message), json_file)
    return [markdown_file, json_file]
