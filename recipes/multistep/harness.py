"""The multistep harness: one chat call per part of the task, the context compacted every few parts.

A plain program: `python -m recipes.multistep.harness`. It reads the task from $HARNESSRL_TASK and talks to whatever
OpenAI-compatible server OPENAI_BASE_URL / OPENAI_API_KEY name. The messages of each call are
`recipes.multistep.conversation.next_messages`; prints one line per part's reply.
Optional task fields: "model" (default "policy"), "max_tokens", "temperature" (default 1.0),
"compact_above_tokens" (the reply tokens since the last compaction, from each answer's `usage.completion_tokens`,
past which it compacts).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from openai import OpenAI

from recipes.multistep.conversation import Message, next_messages, reply_tokens_after
from recipes.multistep.tasks import DEFAULT_MAX_TOKENS

DEFAULT_TEMPERATURE = 1.0


def load_task() -> dict:
    """The task JSON named by $HARNESSRL_TASK (default ./task.json)."""
    return json.loads(Path(os.environ.get("HARNESSRL_TASK", "task.json")).read_text())


def run_episode(client: Any, task: dict[str, Any]) -> list[str]:
    """Every part in order, one call each; the replies."""
    messages: list[Message] = []
    replies: list[str] = []
    reply_tokens = 0
    for _ in task["steps"]:
        messages = next_messages(task, messages, replies, reply_tokens)
        answer = client.chat.completions.create(
            model=task.get("model", "policy"), messages=messages,
            max_tokens=task.get("max_tokens", DEFAULT_MAX_TOKENS),
            temperature=task.get("temperature", DEFAULT_TEMPERATURE))
        replies.append(answer.choices[0].message.content or "")
        completion_tokens = getattr(getattr(answer, "usage", None), "completion_tokens", None) or 0
        reply_tokens = reply_tokens_after(task, reply_tokens, completion_tokens)
    return replies


def main() -> int:
    for index, reply in enumerate(run_episode(OpenAI(), load_task())):
        print(f"part {index + 1}: {reply!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
