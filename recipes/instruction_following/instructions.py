"""The instruction kinds: how each samples its parameters, describes itself to the model, and is checked.

A task's instruction is `{"kind": name, "params": {...}}`; `describe` and `check` need nothing else, so graders
re-check stored tasks without the generator's state.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from recipes.instruction_following import checks

Params = dict[str, Any]

FORBIDDEN_POOL = ("very", "really", "thing", "good", "important", "also", "just", "basically", "nice", "great")
START_PHRASES = ("Here is my answer", "Let me explain", "To begin with", "In short", "Dear reader")
END_PHRASES = ("That is all for now.", "Thanks for reading.", "Any other questions?", "Hope this helps.")
SECTION_SPLITTERS = ("Section", "SECTION", "Part")
POSTSCRIPT_MARKERS = ("P.S.", "P.P.S")


@dataclass(frozen=True)
class InstructionKind:
    """One verifiable instruction kind."""

    name: str  # stable id stored in tasks, e.g. "change_case:english_lowercase"
    family: str  # at most one kind per family in a task
    sample: Callable[[random.Random, list[str]], Params]  # parameters from an rng and the topic's keywords
    describe: Callable[[Params], str]  # the sentence appended to the prompt
    check: Callable[[str, Params], bool]  # whether a response follows it


def _relation(rng: random.Random) -> str:
    return rng.choice(checks.RELATIONS)


def _words_params(rng: random.Random, _: list[str]) -> Params:
    relation = _relation(rng)
    return {"relation": relation, "num_words": rng.choice((50, 80, 120, 200) if relation == "at least" else
                                                          (60, 100, 150, 300))}


def _sentences_params(rng: random.Random, _: list[str]) -> Params:
    relation = _relation(rng)
    return {"relation": relation, "num_sentences": rng.randint(3, 8) if relation == "at least" else rng.randint(4, 10)}


def _frequency_params(rng: random.Random, keywords: list[str]) -> Params:
    return {"keyword": rng.choice(keywords), "relation": _relation(rng), "frequency": rng.randint(2, 4)}


KINDS: tuple[InstructionKind, ...] = (
    InstructionKind(
        "change_case:english_lowercase", "case", lambda rng, kw: {},
        lambda p: "Your entire response must be in lowercase letters; no capital letters at all.",
        lambda text, p: checks.all_lowercase(text)),
    InstructionKind(
        "change_case:english_capital", "case", lambda rng, kw: {},
        lambda p: "Your entire response must be in capital letters.",
        lambda text, p: checks.all_uppercase(text)),
    InstructionKind(
        "length_constraints:number_words", "length", _words_params,
        lambda p: f"Answer with {p['relation']} {p['num_words']} words.",
        lambda text, p: checks.word_count(text, p["relation"], p["num_words"])),
    InstructionKind(
        "length_constraints:number_sentences", "length", _sentences_params,
        lambda p: f"Your response should contain {p['relation']} {p['num_sentences']} sentences.",
        lambda text, p: checks.sentence_count(text, p["relation"], p["num_sentences"])),
    InstructionKind(
        "length_constraints:number_paragraphs", "length", lambda rng, kw: {"num_paragraphs": rng.randint(2, 5)},
        lambda p: (f"Write exactly {p['num_paragraphs']} paragraphs, separated from each other by a line "
                   "containing only the markdown divider ***."),
        lambda text, p: checks.paragraph_count(text, p["num_paragraphs"])),
    InstructionKind(
        "keywords:existence", "keywords", lambda rng, kw: {"keywords": sorted(rng.sample(kw, rng.randint(1, 3)))},
        lambda p: f"Include the keywords {', '.join(repr(k) for k in p['keywords'])} in your response.",
        lambda text, p: checks.includes_keywords(text, p["keywords"])),
    InstructionKind(
        "keywords:forbidden_words", "keywords",
        lambda rng, kw: {"forbidden_words": sorted(rng.sample(FORBIDDEN_POOL, rng.randint(1, 3)))},
        lambda p: f"Do not use any of these words: {', '.join(repr(w) for w in p['forbidden_words'])}.",
        lambda text, p: checks.excludes_words(text, p["forbidden_words"])),
    InstructionKind(
        "keywords:frequency", "keywords", _frequency_params,
        lambda p: f"The word {p['keyword']!r} should appear {p['relation']} {p['frequency']} times.",
        lambda text, p: checks.keyword_frequency(text, p["keyword"], p["relation"], p["frequency"])),
    InstructionKind(
        "detectable_format:json_format", "layout", lambda rng, kw: {},
        lambda p: "Wrap your entire output in JSON format (you may use a ```json code block).",
        lambda text, p: checks.is_json(text)),
    InstructionKind(
        "detectable_format:number_bullet_lists", "layout", lambda rng, kw: {"num_bullets": rng.randint(2, 6)},
        lambda p: (f"Your answer must contain exactly {p['num_bullets']} bullet points, each a line starting "
                   "with '* '."),
        lambda text, p: checks.bullet_count(text, p["num_bullets"])),
    InstructionKind(
        "detectable_format:multiple_sections", "layout",
        lambda rng, kw: {"section_splitter": rng.choice(SECTION_SPLITTERS), "num_sections": rng.randint(2, 5)},
        lambda p: (f"Your response must have {p['num_sections']} sections; start each with "
                   f"'{p['section_splitter']} X', where X is the section number."),
        lambda text, p: checks.section_count(text, p["section_splitter"], p["num_sections"])),
    InstructionKind(
        "detectable_format:title", "title", lambda rng, kw: {},
        lambda p: "Give your answer a title wrapped in double angular brackets, such as <<my title>>.",
        lambda text, p: checks.has_title(text)),
    InstructionKind(
        "startend:start_phrase", "startend", lambda rng, kw: {"phrase": rng.choice(START_PHRASES)},
        lambda p: f"Start your response with the exact phrase {p['phrase']!r}.",
        lambda text, p: checks.starts_with(text, p["phrase"])),
    InstructionKind(
        "startend:end_checker", "startend", lambda rng, kw: {"end_phrase": rng.choice(END_PHRASES)},
        lambda p: f"Finish your response with the exact phrase {p['end_phrase']!r}; nothing may follow it.",
        lambda text, p: checks.ends_with(text, p["end_phrase"])),
    InstructionKind(
        "startend:quotation", "startend", lambda rng, kw: {},
        lambda p: "Wrap your entire response in double quotation marks.",
        lambda text, p: checks.wrapped_in_quotes(text)),
    InstructionKind(
        "punctuation:no_comma", "punctuation", lambda rng, kw: {},
        lambda p: "Do not use any commas in your response.",
        lambda text, p: checks.no_commas(text)),
    InstructionKind(
        "detectable_content:number_placeholders", "content",
        lambda rng, kw: {"num_placeholders": rng.randint(1, 4)},
        lambda p: (f"Include at least {p['num_placeholders']} placeholders in square brackets, "
                   "such as [address]."),
        lambda text, p: checks.placeholder_count(text, p["num_placeholders"])),
    InstructionKind(
        "detectable_content:postscript", "postscript",
        lambda rng, kw: {"postscript_marker": rng.choice(POSTSCRIPT_MARKERS)},
        lambda p: f"At the end of your response, add a postscript starting with {p['postscript_marker']}.",
        lambda text, p: checks.has_postscript(text, p["postscript_marker"])),
)

KINDS_BY_NAME = {kind.name: kind for kind in KINDS}

# Pairs that cannot both be followed (beyond the one-kind-per-family rule).
CONFLICTS = frozenset(frozenset(pair) for pair in (
    *(("detectable_format:json_format", other) for other in (
        "length_constraints:number_paragraphs", "detectable_format:title", "startend:start_phrase",
        "startend:end_checker", "startend:quotation", "punctuation:no_comma", "detectable_content:postscript")),
    ("detectable_content:postscript", "startend:end_checker"),
    ("detectable_content:postscript", "startend:quotation"),
    ("detectable_format:multiple_sections", "length_constraints:number_paragraphs"),
    ("detectable_format:number_bullet_lists", "length_constraints:number_paragraphs"),
))


def kind_of(name: str) -> InstructionKind:
    """The kind called `name`."""
    if name not in KINDS_BY_NAME:
        raise KeyError(f"unknown instruction kind {name!r}; known kinds: {', '.join(sorted(KINDS_BY_NAME))}")
    return KINDS_BY_NAME[name]


def compatible(names: list[str], candidate: str) -> bool:
    """Whether `candidate` can join the instructions `names` (distinct family, no listed conflict)."""
    family = kind_of(candidate).family
    return all(kind_of(n).family != family and frozenset((n, candidate)) not in CONFLICTS for n in names)
