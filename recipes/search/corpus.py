"""A fictional encyclopedia generated from a seed: people, cities, companies and devices, one document each.

Every name is invented (built from syllables), so a model cannot know an answer without retrieving it. People's
documents do not mention devices and devices' documents do not mention birthplaces: two-hop questions need two searches.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

SYLLABLES = ("ka", "lo", "mer", "vin", "dra", "sel", "tor", "an", "bel", "quo", "rith", "zan", "mo", "ve", "lin",
             "gar", "tes", "phi", "nor", "ul", "bra", "cas", "dun", "el", "fen", "hal", "ist", "jor", "ket", "ma",
             "os", "pel", "ru", "sta", "tu", "var", "wen", "yel", "zo", "ceth")
DEVICE_NOUNS = ("loom", "lantern", "compass", "engine", "pump", "telescope", "press", "clock", "kiln", "valve",
                "barometer", "sextant")
COMPANY_SUFFIXES = ("Works", "Industries", "Instruments", "Foundry", "Company")
PROFESSIONS = ("engineer", "clockmaker", "chemist", "astronomer", "carpenter", "physician", "glassblower", "surveyor")
REGIONS = ("northern", "southern", "eastern", "western", "central")
CITY_FEATURES = ("a river port", "a hill town", "a market town", "a mining town", "a coastal city", "a canal city")


@dataclass(frozen=True)
class Document:
    """One encyclopedia entry."""

    doc_id: str  # stable id, e.g. "person-0007"
    title: str  # the entity's name
    text: str  # the entry, which names the title


@dataclass(frozen=True)
class WorldSize:
    """How many entities of each kind a world has."""

    cities: int = 40
    companies: int = 50
    people: int = 200
    devices: int = 200


@dataclass(frozen=True)
class World:
    """The generated entities and their facts (names keyed by index)."""

    cities: list[str]  # city names
    companies: list[tuple[str, int, int]]  # (name, headquarters city index, founding year)
    people: list[tuple[str, int, int, str]]  # (name, birth city index, birth year, profession)
    devices: list[tuple[str, int, int, int]]  # (name, inventor person index, manufacturer company index, year)


class _Names:
    """Unique invented words from a seeded rng."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def word(self) -> str:
        while True:
            word = "".join(self.rng.choice(SYLLABLES) for _ in range(self.rng.randint(2, 3))).capitalize()
            if word not in self.used:
                self.used.add(word)
                return word


def _article(noun: str) -> str:
    return "an" if noun[0] in "aeiou" else "a"


def build_world(seed: int, size: WorldSize = WorldSize()) -> World:
    """The world for `seed` (same seed and size, same world)."""
    if size.devices > size.people:
        raise ValueError(f"each device needs its own inventor: devices={size.devices} > people={size.people}")
    rng = random.Random(f"search-world:{seed}")
    names = _Names(rng)
    cities = [names.word() for _ in range(size.cities)]
    companies = [(f"{names.word()} {rng.choice(COMPANY_SUFFIXES)}", rng.randrange(size.cities), rng.randint(1820, 1960))
                 for _ in range(size.companies)]
    people = [(f"{names.word()} {names.word()}", rng.randrange(size.cities), rng.randint(1800, 1950),
               rng.choice(PROFESSIONS)) for _ in range(size.people)]
    inventors = rng.sample(range(size.people), size.devices)
    devices = [(f"{names.word()} {rng.choice(DEVICE_NOUNS)}", inventor, rng.randrange(size.companies),
                people[inventor][2] + rng.randint(20, 50)) for inventor in inventors]
    return World(cities=cities, companies=companies, people=people, devices=devices)


def _person_doc(i: int, person: tuple[str, int, int, str], world: World) -> Document:
    name, city, year, profession = person
    return Document(f"person-{i:04d}", name,
                    f"{name} was {_article(profession)} {profession} born in {world.cities[city]} in {year}. "
                    f"{name.split()[1]} published several notebooks during a long career.")


def _device_doc(i: int, device: tuple[str, int, int, int], world: World) -> Document:
    name, inventor, company, year = device
    return Document(f"device-{i:04d}", name,
                    f"The {name} was invented by {world.people[inventor][0]} in {year}. "
                    f"The {name} is manufactured by {world.companies[company][0]}.")


def documents(world: World) -> list[Document]:
    """One document per city, company, person and device."""
    rng = random.Random(len(world.cities) * 7919 + len(world.people))
    docs = [Document(f"city-{i:04d}", city, f"{city} is {rng.choice(CITY_FEATURES)} in the {rng.choice(REGIONS)} "
                                           f"province. {city} is known for its old bridges and its library.")
            for i, city in enumerate(world.cities)]
    docs += [Document(f"company-{i:04d}", name, f"{name} is a manufacturer founded in {year}. "
                                                f"{name} is headquartered in {world.cities[city]}.")
             for i, (name, city, year) in enumerate(world.companies)]
    docs += [_person_doc(i, person, world) for i, person in enumerate(world.people)]
    docs += [_device_doc(i, device, world) for i, device in enumerate(world.devices)]
    return docs
