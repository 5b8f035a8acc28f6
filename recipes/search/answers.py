"""Exact match after normalisation: lowercase, no punctuation, no articles (a, an, the), single spaces."""

from __future__ import annotations

import re
import string
from collections.abc import Sequence

ARTICLES_RE = re.compile(r"\b(a|an|the)\b")
PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """`text` lowercased, without punctuation or articles, whitespace collapsed."""
    lowered = text.lower().translate(PUNCTUATION)
    return " ".join(ARTICLES_RE.sub(" ", lowered).split())


def exact_match(prediction: str, answers: Sequence[str]) -> bool:
    """Whether the normalised prediction equals one of the normalised gold answers."""
    if not answers:
        raise ValueError("a task needs at least one gold answer")
    normalized = normalize_answer(prediction)
    return any(normalized == normalize_answer(answer) for answer in answers)
