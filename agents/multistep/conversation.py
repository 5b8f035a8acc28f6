"""The multistep harness's conversation as pure functions: the messages of each part's call, with compaction.

Parts are sent one per call. Between compactions each call extends the previous one (the history, the model's reply,
the next part), so the trainer merges them into one sample. When the previous call's context (its prompt and reply,
in tokens, as the server's `usage` reported them) passed the task's `compact_above_tokens`, the history is replaced
by a single message holding a summary of the replies so far (the harness's own notes, the first words of each
reply), as agent harnesses compact a conversation that grows past a budget: that call's prompt extends no earlier
call, so it starts a new training sample. How often that happens depends on how long the policy's replies are, so
rollouts of one task split into different numbers of samples (the rollout-level ablation needs that variance).
"""

from __future__ import annotations

from typing import Any

from agents.multistep.tasks import DEFAULT_COMPACT_ABOVE_TOKENS, describe_step

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


def compacts_after(task: dict[str, Any], context_tokens: int | None) -> bool:
    """Whether the context is compacted before the next part, given the previous call's context in tokens
    (prompt + reply; None when the server reported no usage: never compacted)."""
    budget = task.get("compact_above_tokens", DEFAULT_COMPACT_ABOVE_TOKENS)
    return context_tokens is not None and context_tokens > budget


def next_messages(task: dict[str, Any], messages: list[Message], replies: list[str],
                  context_tokens: int | None = None) -> list[Message]:
    """The messages of the call for part len(replies), given the previous call's messages, the replies so far and
    the previous call's context in tokens."""
    index = len(replies)
    if index == 0:
        return [{"role": "user", "content": f"{intro(task)}\n\n{part_text(task, 0)}"}]
    if compacts_after(task, context_tokens):
        return [{"role": "user", "content": f"{intro(task)} Notes on the parts so far: {summary(replies)}\n\n"
                                            f"{part_text(task, index)}"}]
    return [*messages, {"role": "assistant", "content": replies[-1]},
            {"role": "user", "content": part_text(task, index)}]


def contexts(context_tokens: list[int | None], task: dict[str, Any]) -> int:
    """Contexts of an episode (the first plus one per compaction) given each call's context in tokens: the samples
    when every merge succeeds. The last call's size compacts nothing (no part follows it)."""
    return 1 + sum(compacts_after(task, tokens) for tokens in context_tokens[:-1])
