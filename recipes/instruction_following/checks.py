"""Pure checkers for verifiable instructions: each takes the response text and the instruction's parameters.

Counting rules (documented because graders must be predictable):
- words: runs of letters, digits, apostrophes or hyphens (`don't`, `well-known` are one word);
- sentences: non-empty pieces after splitting on `.`, `!` or `?` runs;
- paragraphs: non-empty pieces after splitting on lines that are exactly `***`;
- bullets: lines starting with `* ` or `- ` (after indentation);
- keywords, start/end phrases, section and postscript markers: case-insensitive (so case rules can combine).
"""

from __future__ import annotations

import json
import re

WORD_RE = re.compile(r"[A-Za-z0-9'\-]+")
SENTENCE_SPLIT_RE = re.compile(r"[.!?]+")
PARAGRAPH_SPLIT_RE = re.compile(r"^\s*\*\*\*\s*$", flags=re.MULTILINE)
BULLET_RE = re.compile(r"^\s*[*-]\s+\S", flags=re.MULTILINE)
TITLE_RE = re.compile(r"<<[^\n<>]+>>")
PLACEHOLDER_RE = re.compile(r"\[[^\[\]\n]+\]")
JSON_FENCE_RE = re.compile(r"^```(?:json|JSON|Json)?\s*\n?(.*?)\n?```$", flags=re.DOTALL)

RELATIONS = ("at least", "less than")


def compare(count: int, relation: str, target: int) -> bool:
    """`count` against `target` under an IFEval relation: 'at least' (>=) or 'less than' (<)."""
    if relation == "at least":
        return count >= target
    if relation == "less than":
        return count < target
    raise ValueError(f"unknown relation {relation!r}; use one of {RELATIONS}")


def count_words(text: str) -> int:
    return len(WORD_RE.findall(text))


def count_sentences(text: str) -> int:
    return sum(1 for piece in SENTENCE_SPLIT_RE.split(text) if piece.strip())


def split_paragraphs(text: str) -> list[str]:
    return [piece for piece in PARAGRAPH_SPLIT_RE.split(text) if piece.strip()]


def keyword_count(text: str, keyword: str) -> int:
    return len(re.findall(rf"\b{re.escape(keyword)}\b", text, flags=re.IGNORECASE))


def all_lowercase(text: str) -> bool:
    return any(ch.isalpha() for ch in text) and text == text.lower()


def all_uppercase(text: str) -> bool:
    return any(ch.isalpha() for ch in text) and text == text.upper()


def word_count(text: str, relation: str, num_words: int) -> bool:
    return compare(count_words(text), relation, num_words)


def sentence_count(text: str, relation: str, num_sentences: int) -> bool:
    return compare(count_sentences(text), relation, num_sentences)


def paragraph_count(text: str, num_paragraphs: int) -> bool:
    """Exactly `num_paragraphs` paragraphs separated by `***` lines, none of them empty."""
    pieces = PARAGRAPH_SPLIT_RE.split(text)
    if any(not piece.strip() for piece in pieces):
        return False
    return len(pieces) == num_paragraphs


def includes_keywords(text: str, keywords: list[str]) -> bool:
    return all(keyword_count(text, keyword) > 0 for keyword in keywords)


def excludes_words(text: str, forbidden_words: list[str]) -> bool:
    return all(keyword_count(text, word) == 0 for word in forbidden_words)


def keyword_frequency(text: str, keyword: str, relation: str, frequency: int) -> bool:
    return compare(keyword_count(text, keyword), relation, frequency)


def is_json(text: str) -> bool:
    """The whole response is one JSON value (a ```json fence around it is allowed)."""
    stripped = text.strip()
    fenced = JSON_FENCE_RE.match(stripped)
    if fenced:
        stripped = fenced.group(1).strip()
    try:
        json.loads(stripped)
    except ValueError:
        return False
    return True


def bullet_count(text: str, num_bullets: int) -> bool:
    return len(BULLET_RE.findall(text)) == num_bullets


def has_title(text: str) -> bool:
    return TITLE_RE.search(text) is not None


def section_count(text: str, section_splitter: str, num_sections: int) -> bool:
    """At least `num_sections` sections, each starting with `{section_splitter} <n>` (marker case-insensitive)."""
    markers = re.findall(rf"\b{re.escape(section_splitter)}\s+\d+", text, flags=re.IGNORECASE)
    return len(markers) >= num_sections


def starts_with(text: str, phrase: str) -> bool:
    return text.strip().lower().startswith(phrase.strip().lower())


def ends_with(text: str, phrase: str) -> bool:
    return text.strip().lower().endswith(phrase.strip().lower())


def wrapped_in_quotes(text: str) -> bool:
    stripped = text.strip()
    return len(stripped) > 1 and stripped[0] == '"' and stripped[-1] == '"'


def no_commas(text: str) -> bool:
    return "," not in text and "，" not in text


def placeholder_count(text: str, num_placeholders: int) -> bool:
    return len(PLACEHOLDER_RE.findall(text)) >= num_placeholders


def has_postscript(text: str, postscript_marker: str) -> bool:
    """A line starting with the marker (e.g. `P.S.`), case-insensitive."""
    pattern = rf"^\s*{re.escape(postscript_marker)}"
    return re.search(pattern, text, flags=re.IGNORECASE | re.MULTILINE) is not None
