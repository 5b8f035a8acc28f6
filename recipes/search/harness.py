"""The search harness: a Search-R1-style loop of chat calls with a local BM25 search tool.

A plain program: `python -m recipes.search.harness`, run in a working directory that holds `corpus.jsonl`. It reads
the task from $HARNESSRL_TASK and talks to whatever OpenAI-compatible server OPENAI_BASE_URL / OPENAI_API_KEY name.
Each turn: one chat call stopped at `</search>` or `</answer>`; a search appends the results as a user message, an
answer ends the loop, anything else gets a reminder of the format. At most `max_turns` calls. Prints the answer.
Optional task fields: "model" (default "policy"), "max_turns", "top_k", "max_tokens", "temperature".
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from openai import OpenAI

from recipes.search.actions import (
    FIRST_PROMPT,
    INVALID_REPLY,
    STOP_STRINGS,
    ActionKind,
    completed_reply,
    information_message,
    parse_action,
)
from recipes.search.retrieval import CORPUS_FILE, Retriever, read_corpus
from recipes.search.tasks import DEFAULT_MAX_TURNS, DEFAULT_TOP_K

DEFAULT_MAX_TOKENS = 256
DEFAULT_TEMPERATURE = 1.0


def load_task() -> dict:
    """The task JSON named by $HARNESSRL_TASK (default ./task.json)."""
    return json.loads(Path(os.environ.get("HARNESSRL_TASK", "task.json")).read_text())


def run_episode(client: OpenAI, retriever: Retriever, task: dict) -> str | None:
    """Talk until the model answers or the turns run out; the answer, or None."""
    messages = [{"role": "user", "content": FIRST_PROMPT.format(question=task["question"])}]
    for _ in range(task.get("max_turns", DEFAULT_MAX_TURNS)):
        reply = client.chat.completions.create(
            model=task.get("model", "policy"), messages=messages, stop=STOP_STRINGS,
            max_tokens=task.get("max_tokens", DEFAULT_MAX_TOKENS),
            temperature=task.get("temperature", DEFAULT_TEMPERATURE),
            extra_body={"include_stop_str_in_output": True},
        )
        text = reply.choices[0].message.content or ""
        action = parse_action(text)
        if action.kind is ActionKind.ANSWER:
            return action.content
        messages.append({"role": "assistant", "content": completed_reply(text, action)})
        if action.kind is ActionKind.SEARCH:
            docs = retriever.search(action.content, task.get("top_k", DEFAULT_TOP_K))
            messages.append({"role": "user", "content": information_message(docs)})
        else:
            messages.append({"role": "user", "content": INVALID_REPLY})
    return None


def main() -> int:
    task = load_task()
    retriever = Retriever(read_corpus(Path(CORPUS_FILE)))
    answer = run_episode(OpenAI(), retriever, task)
    print(answer if answer is not None else "(no answer within the turn limit)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
