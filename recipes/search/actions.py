"""The Search-R1 text protocol, pure: the first prompt, parsing an action from a reply, the information message.

The model writes `<search>query</search>` to search and `<answer>text</answer>` to finish; results come back
between `<information>` and `</information>`. The first complete or trailing (cut by a stop string) tag wins.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from recipes.search.corpus import Document

ACTION_RE = re.compile(r"<(search|answer)>(.*?)(?:</\1>|$)", flags=re.DOTALL)
STOP_STRINGS = ["</search>", "</answer>"]

FIRST_PROMPT = (
    "Answer the question below. You cannot know the answer yourself: look it up in the encyclopedia. To search it, "
    "write <search>your query</search> and stop; the best entries come back between <information> and "
    "</information>. Search as many times as you need. When you know the answer, write only the answer between "
    "<answer> and </answer>, for example <answer>Springfield</answer>.\nQuestion: {question}"
)
INVALID_REPLY = ("That was neither a search nor an answer. Write <search>query</search> to search, or "
                 "<answer>answer</answer> to finish.")


class ActionKind(StrEnum):
    SEARCH = "search"
    ANSWER = "answer"
    INVALID = "invalid"


@dataclass(frozen=True)
class Action:
    """What a reply asks for."""

    kind: ActionKind  # search, answer, or invalid (neither tag, or an empty one)
    content: str  # the query or the answer, stripped ('' when invalid)


def parse_action(text: str) -> Action:
    """The first search or answer in `text`."""
    match = ACTION_RE.search(text)
    if match is None or not match.group(2).strip():
        return Action(ActionKind.INVALID, "")
    return Action(ActionKind(match.group(1)), match.group(2).strip())


def completed_reply(text: str, action: Action) -> str:
    """The reply as kept in the conversation: cut after the action's closing tag, which is added when a stop cut it."""
    if action.kind is ActionKind.INVALID:
        return text
    closing = f"</{action.kind}>"
    end = text.find(closing)
    return text + closing if end < 0 else text[: end + len(closing)]


def information_message(docs: Sequence[Document]) -> str:
    """The user message that returns search results."""
    if not docs:
        return "<information>No entry matches that query.</information>"
    entries = "\n".join(f"Doc {rank} ({doc.title}): {doc.text}" for rank, doc in enumerate(docs, start=1))
    return f"<information>{entries}</information>"
