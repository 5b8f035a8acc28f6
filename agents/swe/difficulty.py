"""The difficulty filter: from k probe rollouts per task, keep the tasks the current policy can learn from.

A task solved in all k probes teaches nothing (every advantage is zero) and is dropped. A task solved in some but not
all probes ("mixed") carries signal and is kept. A task never solved ("unsolved") carries no signal now but may later;
a configurable number of them is added to training (the paper: about 5,000 mixed + 1,000 unsolved, 400 held out).

The held-out validation split is drawn FIRST, from the non-trivial pool (mixed + unsolved), as a stratified sample:
its mixed/unsolved proportion is the pool's (rounded). Drawing it first guarantees its size whatever the training
sizes ask, and stratifying makes the validation difficulty mirror the candidate pool's, not the training mix. Training
then takes up to `n_mixed` of the remaining mixed tasks and up to `n_unsolved` of the remaining unsolved ones.
Every draw is a shuffle of the sorted ids with a generator seeded by `seed`: the same outcomes and seed give the same
splits whatever the input order.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

Difficulty = Literal["solved", "mixed", "unsolved"]
Outcome = Sequence[float | bool]  # one entry per probe: a reward (solved when >= pass_threshold) or a solved flag


@dataclass(frozen=True)
class DifficultyCounts:
    """How many tasks fell in each class and where they went."""

    probed: int  # tasks with probe outcomes
    solved: int  # solved in all k probes: dropped
    mixed: int  # solved in some but not all probes
    unsolved: int  # never solved
    train_mixed: int  # mixed tasks in the training split
    train_unsolved: int  # unsolved tasks in the training split
    val_mixed: int  # mixed tasks in the held-out split
    val_unsolved: int  # unsolved tasks in the held-out split

    @property
    def unused(self) -> int:
        """Non-trivial tasks left out of both splits (the sizes asked for fewer)."""
        return self.mixed + self.unsolved - self.train_mixed - self.train_unsolved - self.val_mixed - self.val_unsolved

    def as_dict(self) -> dict[str, int]:
        """Every count, `unused` included."""
        return {**{name: getattr(self, name) for name in self.__dataclass_fields__}, "unused": self.unused}


@dataclass(frozen=True)
class DifficultySplit:
    """The selected training and held-out instance ids, with each task's class."""

    train: list[str]  # training instance ids, in a seeded shuffled order
    val: list[str]  # held-out instance ids, in a seeded shuffled order
    difficulty: dict[str, Difficulty]  # every probed task's class
    solved: dict[str, int]  # every probed task's number of solved probes (0..k)
    counts: DifficultyCounts  # the class sizes and split composition
    k: int  # probes per task
    seed: int  # the seed of every draw


def solved_count(outcome: Outcome, pass_threshold: float = 1.0) -> int:
    """Probes that solved the task: True flags, or rewards >= `pass_threshold`."""
    count = 0
    for value in outcome:
        if isinstance(value, bool):
            count += value
        elif isinstance(value, int | float):
            count += float(value) >= pass_threshold
        else:
            raise ValueError(f"probe outcome {value!r} is neither a reward nor a solved flag; "
                             "record failed rollouts as reward 0.0")
    return count


def classify(solved: int, k: int) -> Difficulty:
    """"solved" (k of k), "mixed" (0 < solved < k) or "unsolved" (0 of k)."""
    if not 0 <= solved <= k:
        raise ValueError(f"solved={solved} is outside [0, k={k}]")
    return "solved" if solved == k else "unsolved" if solved == 0 else "mixed"


def stratified_take(n: int, mixed: int, unsolved: int) -> tuple[int, int]:
    """(mixed, unsolved) shares of `n` draws from a pool of `mixed` + `unsolved`, proportional and rounded."""
    pool = mixed + unsolved
    n = min(n, pool)
    if pool == 0:
        return 0, 0
    take_mixed = min((2 * n * mixed + pool) // (2 * pool), mixed)
    take_unsolved = min(n - take_mixed, unsolved)
    return n - take_unsolved, take_unsolved


def _shuffled(ids: Sequence[str], rng: random.Random) -> list[str]:
    order = sorted(ids)
    rng.shuffle(order)
    return order


def select_by_difficulty(outcomes: Mapping[str, Outcome], *, k: int, n_mixed: int, n_unsolved: int, n_heldout: int,
                         seed: int, pass_threshold: float = 1.0) -> DifficultySplit:
    """The training and held-out splits of the probed tasks (see the module docstring for the rules)."""
    if k < 1:
        raise ValueError(f"k={k} must be >= 1 (probe rollouts per task)")
    for name, size in (("n_mixed", n_mixed), ("n_unsolved", n_unsolved), ("n_heldout", n_heldout)):
        if size < 0:
            raise ValueError(f"{name}={size} must be >= 0")
    wrong = {iid: len(o) for iid, o in outcomes.items() if len(o) != k}
    if wrong:
        raise ValueError(f"every task needs exactly k={k} probe outcomes; these have another number: "
                         f"{dict(list(wrong.items())[:5])}; rerun their probes or drop them first")
    solved = {iid: solved_count(outcome, pass_threshold) for iid, outcome in outcomes.items()}
    difficulty = {iid: classify(count, k) for iid, count in solved.items()}
    rng = random.Random(f"select_by_difficulty:{seed}")
    mixed = _shuffled([iid for iid, d in difficulty.items() if d == "mixed"], rng)
    unsolved = _shuffled([iid for iid, d in difficulty.items() if d == "unsolved"], rng)
    val_mixed, val_unsolved = stratified_take(n_heldout, len(mixed), len(unsolved))
    train_mixed = mixed[val_mixed:val_mixed + n_mixed]
    train_unsolved = unsolved[val_unsolved:val_unsolved + n_unsolved]
    val = mixed[:val_mixed] + unsolved[:val_unsolved]
    train = train_mixed + train_unsolved
    rng.shuffle(val)
    rng.shuffle(train)
    counts = DifficultyCounts(probed=len(outcomes), solved=len(outcomes) - len(mixed) - len(unsolved),
                              mixed=len(mixed), unsolved=len(unsolved), train_mixed=len(train_mixed),
                              train_unsolved=len(train_unsolved), val_mixed=val_mixed, val_unsolved=val_unsolved)
    return DifficultySplit(train, val, difficulty, solved, counts, k, seed)
