"""The multistep harness's conversation as pure functions: the messages of each part's call, with compaction.

Parts are sent one per call. Between compactions each call extends the previous one (the history, the model's reply,
the next part), so the trainer merges them into one sample. When the model's replies since the last compaction (in
tokens, as the server's `usage.completion_tokens` reported them) passed the task's `compact_above_tokens`, the
history is replaced by a single message holding a summary of the replies so far (the harness's own notes, the first
words of each reply), as agent harnesses compact a conversation that grows past a budget: that call's prompt extends
no earlier call, so it starts a new training sample. How often that happens depends on how long the policy's replies
are, so rollouts of one task split into different numbers of samples (the rollout-level ablation needs that
variance). The budget counts the replies only: the harness's own text (intro, parts, notes) is the same for every
rollout of a task and would only shift the threshold.
"""

from __future__ import annotations

from typing import Any

from recipes.multistep.tasks import DEFAULT_COMPACT_ABOVE_TOKENS, describe_step

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


def compacts_after(task: dict[str, Any], reply_tokens: int) -> bool:
    """Whether the context is compacted before the next part, given the tokens of the replies since the last
    compaction (0 when the server reported no usage: never compacted)."""
    return reply_tokens > task.get("compact_above_tokens", DEFAULT_COMPACT_ABOVE_TOKENS)


def next_messages(task: dict[str, Any], messages: list[Message], replies: list[str],
                  reply_tokens: int = 0) -> list[Message]:
    """The messages of the call for part len(replies), given the previous call's messages, the replies so far and
    the tokens of the replies since the last compaction."""
    index = len(replies)
    if index == 0:
        return [{"role": "user", "content": f"{intro(task)}\n\n{part_text(task, 0)}"}]
    if compacts_after(task, reply_tokens):
        return [{"role": "user", "content": f"{intro(task)} Notes on the parts so far: {summary(replies)}\n\n"
                                            f"{part_text(task, index)}"}]
    return [*messages, {"role": "assistant", "content": replies[-1]},
            {"role": "user", "content": part_text(task, index)}]


def reply_tokens_after(task: dict[str, Any], reply_tokens: int, completion_tokens: int) -> int:
    """The reply tokens since the last compaction once a call answered with `completion_tokens`, given the count
    before that call (reset when the call's context was a fresh one)."""
    return (0 if compacts_after(task, reply_tokens) else reply_tokens) + completion_tokens


def contexts(completion_tokens: list[int], task: dict[str, Any]) -> int:
    """Contexts of an episode (the first plus one per compaction) given each call's reply in tokens: the samples
    when every merge succeeds. The last reply compacts nothing (no part follows it)."""
    count, since = 1, 0
    for tokens in completion_tokens[:-1]:
        since = reply_tokens_after(task, since, tokens)
        count += compacts_after(task, since)
    return count
