"""The multistep harness's conversation as pure functions: the messages of each part's call, with compaction.

Parts are sent one per call. Between compactions each call extends the previous one (the history, the model's reply,
the next part), so the trainer merges them into one sample. Every `compact_every` parts the history is replaced by a
single message holding a summary of the replies so far (the harness's own notes, the first words of each reply):
that call's prompt extends no earlier call, so it starts a new training sample.
"""

from __future__ import annotations

from typing import Any

from agents.multistep.tasks import DEFAULT_COMPACT_EVERY, describe_step

Message = dict[str, str]
SUMMARY_WORDS = 8
"""Words of each earlier reply kept in the compaction summary."""


def intro(task: dict[str, Any]) -> str:
    """The first sentence of every context: what is being written, in how many parts."""
    return (f"We are writing a short piece about {task['topic']} in {len(task['steps'])} parts, one reply per "
            "part. Keep each reply to one or two sentences.")


def part_text(task: dict[str, Any], index: int) -> str:
    """The user message of part `index` (0-based)."""
    return f"Part {index + 1} of {len(task['steps'])}: {describe_step(task['steps'][index])}"


def summary(replies: list[str]) -> str:
    """The harness's notes on the replies so far: the first SUMMARY_WORDS words of each."""
    notes = []
    for index, reply in enumerate(replies):
        words = reply.split()
        short = " ".join(words[:SUMMARY_WORDS]) + (" ..." if len(words) > SUMMARY_WORDS else "")
        notes.append(f"part {index + 1}: {short or '(empty)'}")
    return "; ".join(notes)


def compacts_before(task: dict[str, Any], index: int) -> bool:
    """Whether the context is compacted before part `index` (every compact_every parts, never before the first)."""
    every = task.get("compact_every", DEFAULT_COMPACT_EVERY)
    return index > 0 and index % every == 0


def next_messages(task: dict[str, Any], messages: list[Message], replies: list[str]) -> list[Message]:
    """The messages of the call for part len(replies), given the previous call's messages and the replies so far."""
    index = len(replies)
    if index == 0:
        return [{"role": "user", "content": f"{intro(task)}\n\n{part_text(task, 0)}"}]
    if compacts_before(task, index):
        return [{"role": "user", "content": f"{intro(task)} Notes on the parts so far: {summary(replies)}\n\n"
                                            f"{part_text(task, index)}"}]
    return [*messages, {"role": "assistant", "content": replies[-1]},
            {"role": "user", "content": part_text(task, index)}]


def expected_samples(task: dict[str, Any]) -> int:
    """Contexts of a full episode (one per compaction plus the first): the samples when every merge succeeds."""
    return sum(1 for index in range(len(task["steps"])) if index == 0 or compacts_before(task, index))
