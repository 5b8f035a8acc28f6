"""Search tasks: single- and two-hop questions about a generated world, with their gold answers.

Every task of one `generate(count, seed)` call shares the world of `seed` (its corpus is rebuilt from
`corpus_seed` when the working directory is prepared).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from recipes.search.corpus import World, build_world

DEFAULT_MAX_TURNS = 4
DEFAULT_TOP_K = 3

# (question, gold answers, ids of the documents that hold the evidence in hop order)
Question = tuple[str, list[str], list[str]]


def _person_city(w: World, rng: random.Random) -> Question:
    i = rng.randrange(len(w.people))
    name, city, _, _ = w.people[i]
    return f"In which city was {name} born?", [w.cities[city]], [f"person-{i:04d}"]


def _device_inventor(w: World, rng: random.Random) -> Question:
    i = rng.randrange(len(w.devices))
    name, inventor, _, _ = w.devices[i]
    return f"Who invented the {name}?", [w.people[inventor][0]], [f"device-{i:04d}"]


def _device_maker(w: World, rng: random.Random) -> Question:
    i = rng.randrange(len(w.devices))
    name, _, company, _ = w.devices[i]
    return f"Which company manufactures the {name}?", [w.companies[company][0]], [f"device-{i:04d}"]


def _company_city(w: World, rng: random.Random) -> Question:
    i = rng.randrange(len(w.companies))
    name, city, _ = w.companies[i]
    return f"In which city is {name} headquartered?", [w.cities[city]], [f"company-{i:04d}"]


def _inventor_city(w: World, rng: random.Random) -> Question:
    i = rng.randrange(len(w.devices))
    name, inventor, _, _ = w.devices[i]
    city = w.people[inventor][1]
    return (f"In which city was the inventor of the {name} born?", [w.cities[city]],
            [f"device-{i:04d}", f"person-{inventor:04d}"])


def _maker_city(w: World, rng: random.Random) -> Question:
    i = rng.randrange(len(w.devices))
    name, _, company, _ = w.devices[i]
    city = w.companies[company][1]
    return (f"In which city is the company that manufactures the {name} headquartered?", [w.cities[city]],
            [f"device-{i:04d}", f"company-{company:04d}"])


def _inventor_year(w: World, rng: random.Random) -> Question:
    i = rng.randrange(len(w.devices))
    name, inventor, _, _ = w.devices[i]
    return (f"In what year was the inventor of the {name} born?", [str(w.people[inventor][2])],
            [f"device-{i:04d}", f"person-{inventor:04d}"])


SINGLE_HOP: tuple[Callable[[World, random.Random], Question], ...] = (_person_city, _device_inventor, _device_maker,
                                                            _company_city)
TWO_HOP: tuple[Callable[[World, random.Random], Question], ...] = (_inventor_city, _maker_city, _inventor_year)


def generate(count: int, seed: int, max_turns: int = DEFAULT_MAX_TURNS) -> list[dict[str, Any]]:
    """`count` questions about the world of `seed`, half of them two-hop, each with its gold answers."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    world = build_world(seed)
    rng = random.Random(f"search-tasks:{seed}")
    tasks = []
    for index in range(count):
        hops = 1 + index % 2
        template = rng.choice(SINGLE_HOP if hops == 1 else TWO_HOP)
        question, answers, evidence = template(world, rng)
        tasks.append({"id": f"search-{seed}-{index:05d}", "question": question, "answers": answers, "hops": hops,
                      "evidence": evidence, "corpus_seed": seed, "max_turns": max_turns, "top_k": DEFAULT_TOP_K})
    return tasks
