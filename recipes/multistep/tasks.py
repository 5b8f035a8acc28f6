"""Multistep tasks: a short piece about a topic written in 2-6 parts, one reply per part, each part with one
verifiable instruction (the instruction-following recipe's kinds that fit a one- or two-sentence reply).

The number of parts varies by task, and the harness compacts its context whenever its replies since the last
compaction passed `compact_above_tokens`, so the number of training samples per rollout varies with the task and
with the length of the policy's own replies.
"""

from __future__ import annotations

import random
from typing import Any

from recipes.instruction_following.instructions import kind_of
from recipes.instruction_following.tasks import TOPICS

MIN_PARTS = 2
MAX_PARTS = 6
DEFAULT_COMPACT_ABOVE_TOKENS = 40
"""Tokens of the model's replies since the last compaction past which the harness compacts before the next part."""
DEFAULT_MAX_TOKENS = 32

STEP_KINDS = (
    "change_case:english_lowercase",
    "change_case:english_capital",
    "length_constraints:number_words",
    "keywords:existence",
    "keywords:forbidden_words",
    "startend:start_phrase",
    "startend:end_checker",
    "startend:quotation",
    "punctuation:no_comma",
)
"""The instruction kinds a part may carry: each can be followed within a short reply."""

SHORT_WORD_LIMITS = (8, 12, 16)
"""`number_words` limits for one part (the recipe's own: the instruction-following ones are for whole essays)."""

PART_REQUESTS = (
    "Write one sentence about {keyword}.",
    "Describe {keyword} in a few words.",
    "Say why {keyword} matters here.",
    "Give one tip about {keyword}.",
)


def sample_step_instruction(rng: random.Random, keywords: list[str]) -> dict[str, Any]:
    """One instruction for a part: a kind of STEP_KINDS with parameters sized for a short reply."""
    name = rng.choice(STEP_KINDS)
    if name == "length_constraints:number_words":
        return {"kind": name, "params": {"relation": "less than", "num_words": rng.choice(SHORT_WORD_LIMITS)}}
    if name == "keywords:existence":
        return {"kind": name, "params": {"keywords": [rng.choice(keywords)]}}
    return {"kind": name, "params": kind_of(name).sample(rng, keywords)}


def describe_step(step: dict[str, Any]) -> str:
    """The part's request followed by its instruction's sentence."""
    instruction = step["instruction"]
    return f"{step['request']} {kind_of(instruction['kind']).describe(instruction['params'])}"


def generate(count: int, seed: int, compact_above_tokens: int = DEFAULT_COMPACT_ABOVE_TOKENS,
             max_tokens: int = DEFAULT_MAX_TOKENS) -> list[dict[str, Any]]:
    """`count` tasks reproducible from `seed`: id, topic, parts (request + instruction each), harness settings."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if compact_above_tokens < 1:
        raise ValueError(f"compact_above_tokens must be >= 1 (reply tokens between compactions), "
                         f"got {compact_above_tokens}")
    rng = random.Random(f"multistep:{seed}")
    tasks = []
    for index in range(count):
        topic, keywords = rng.choice(TOPICS)
        steps = [{"request": rng.choice(PART_REQUESTS).format(keyword=rng.choice(keywords)),
                  "instruction": sample_step_instruction(rng, list(keywords))}
                 for _ in range(rng.randint(MIN_PARTS, MAX_PARTS))]
        tasks.append({"id": f"multistep-{seed}-{index:05d}", "topic": topic, "steps": steps,
                      "compact_above_tokens": compact_above_tokens, "max_tokens": max_tokens})
    return tasks
