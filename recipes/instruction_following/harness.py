"""The instruction-following harness: one chat call with the task's prompt; prints the answer.

A plain program: `python -m recipes.instruction_following.harness`. It reads the task from $HARNESSRL_TASK and talks
to whatever OpenAI-compatible server OPENAI_BASE_URL / OPENAI_API_KEY name (the official client reads them itself).
Optional task fields: "model" (default "policy"), "max_tokens" (default 512), "temperature" (default 1.0).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from openai import OpenAI

DEFAULT_MAX_TOKENS = 512
DEFAULT_TEMPERATURE = 1.0


def load_task() -> dict:
    """The task JSON named by $HARNESSRL_TASK (default ./task.json)."""
    return json.loads(Path(os.environ.get("HARNESSRL_TASK", "task.json")).read_text())


def main() -> int:
    task = load_task()
    client = OpenAI()
    answer = client.chat.completions.create(
        model=task.get("model", "policy"),
        messages=[{"role": "user", "content": task["prompt"]}],
        max_tokens=task.get("max_tokens", DEFAULT_MAX_TOKENS),
        temperature=task.get("temperature", DEFAULT_TEMPERATURE),
    )
    print(answer.choices[0].message.content or "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
