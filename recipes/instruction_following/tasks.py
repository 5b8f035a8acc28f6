"""Instruction-following tasks generated offline from templates: a request about a topic plus 1-3 instructions."""

from __future__ import annotations

import random
from typing import Any

from recipes.instruction_following.instructions import KINDS, compatible, kind_of

MAX_INSTRUCTIONS = 3

# (topic, keywords that fit an answer about it)
TOPICS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("the history of tea", ("leaves", "trade", "ceremony", "china", "caravan")),
    ("learning to ride a bicycle", ("balance", "pedal", "helmet", "practice", "brakes")),
    ("how volcanoes form", ("magma", "crust", "eruption", "plates", "ash")),
    ("keeping houseplants alive", ("water", "sunlight", "soil", "pots", "roots")),
    ("the life of honeybees", ("hive", "nectar", "queen", "pollen", "swarm")),
    ("planning a weekend hike", ("trail", "map", "boots", "snacks", "weather")),
    ("why the sky is blue", ("light", "scattering", "atmosphere", "wavelength", "sun")),
    ("starting a vegetable garden", ("seeds", "compost", "tomatoes", "sunlight", "weeds")),
    ("the invention of the printing press", ("gutenberg", "ink", "books", "type", "paper")),
    ("saving money on groceries", ("budget", "list", "coupons", "prices", "meals")),
    ("how to brew good coffee", ("beans", "grinder", "water", "filter", "roast")),
    ("the rules of chess", ("pawn", "king", "board", "checkmate", "bishop")),
    ("caring for a new puppy", ("training", "food", "walks", "vet", "toys")),
    ("the water cycle", ("evaporation", "clouds", "rain", "rivers", "ocean")),
    ("writing a good cover letter", ("employer", "skills", "experience", "position", "tone")),
    ("the phases of the moon", ("crescent", "orbit", "shadow", "full", "tides")),
    ("a day at a lighthouse", ("keeper", "lamp", "waves", "ships", "storm")),
    ("learning a second language", ("vocabulary", "grammar", "practice", "accent", "travel")),
    ("how trains changed cities", ("railway", "stations", "suburbs", "commuters", "steam")),
    ("baking bread at home", ("flour", "yeast", "dough", "oven", "crust")),
    ("the migration of birds", ("flight", "winter", "routes", "flocks", "navigation")),
    ("recycling in a small town", ("plastic", "bins", "glass", "council", "waste")),
    ("a guide to stargazing", ("telescope", "constellations", "planets", "dark", "night")),
    ("the benefits of sleep", ("rest", "memory", "dreams", "health", "routine")),
)

REQUESTS = (
    "Write a short blog post about {topic}.",
    "Write a letter to a friend about {topic}.",
    "Explain {topic} to a curious ten-year-old.",
    "Write a short essay on {topic}.",
    "Give advice to a beginner about {topic}.",
    "Write a product description for a book about {topic}.",
    "Write a short story that involves {topic}.",
    "Summarise what everyone should know about {topic}.",
)


def sample_instructions(rng: random.Random, keywords: list[str]) -> list[dict[str, Any]]:
    """1-3 mutually compatible instructions with their parameters."""
    wanted = rng.randint(1, MAX_INSTRUCTIONS)
    names: list[str] = []
    for kind in rng.sample(KINDS, len(KINDS)):
        if len(names) == wanted:
            break
        if compatible(names, kind.name):
            names.append(kind.name)
    return [{"kind": name, "params": kind_of(name).sample(rng, keywords)} for name in names]


def render_prompt(request: str, instructions: list[dict[str, Any]]) -> str:
    """The user message: the request followed by each instruction's description."""
    described = " ".join(kind_of(item["kind"]).describe(item["params"]) for item in instructions)
    return f"{request} {described}"


def generate(count: int, seed: int) -> list[dict[str, Any]]:
    """`count` tasks reproducible from `seed`: id, prompt, topic and instructions."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    rng = random.Random(f"instruction_following:{seed}")
    tasks = []
    for index in range(count):
        topic, keywords = rng.choice(TOPICS)
        request = rng.choice(REQUESTS).format(topic=topic)
        instructions = sample_instructions(rng, list(keywords))
        tasks.append({"id": f"if-{seed}-{index:05d}", "topic": topic, "request": request,
                      "prompt": render_prompt(request, instructions), "instructions": instructions})
    return tasks
