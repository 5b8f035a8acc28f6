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

With the tasks' difficulty-ladder levels (`levels`, recipes/swe/ladder.py) the held-out split is stratified by level
first (each level's share of the non-trivial pool, rounded, largest remainders first), then by class within a level,
so validation reports a solve rate per level; the counts add each level's classes and split sizes (`level<L>_<name>`).
Without levels (or with one) the draws are exactly those above.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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
    levels: dict[int, dict[str, int]] = field(default_factory=dict)  # per ladder level: probed, solved, mixed,
    # unsolved, train, val (empty without levels)

    @property
    def unused(self) -> int:
        """Non-trivial tasks left out of both splits (the sizes asked for fewer)."""
        return self.mixed + self.unsolved - self.train_mixed - self.train_unsolved - self.val_mixed - self.val_unsolved

    def as_dict(self) -> dict[str, int]:
        """Every count, `unused` included, and each level's as `level<L>_<name>`."""
        flat = {name: getattr(self, name) for name in self.__dataclass_fields__ if name != "levels"}
        by_level = {f"level{level}_{name}": value for level, counts in sorted(self.levels.items())
                    for name, value in counts.items()}
        return {**flat, "unused": self.unused, **by_level}


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
                         seed: int, pass_threshold: float = 1.0,
                         levels: Mapping[str, int] | None = None) -> DifficultySplit:
    """The training and held-out splits of the probed tasks (see the module docstring for the rules); `levels`: each
    task's ladder level (a task left out counts as level 3, the original statement)."""
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
    level_of = {iid: (levels or {}).get(iid, 3) for iid in outcomes}
    rng = random.Random(f"select_by_difficulty:{seed}")
    mixed = _shuffled([iid for iid, d in difficulty.items() if d == "mixed"], rng)
    unsolved = _shuffled([iid for iid, d in difficulty.items() if d == "unsolved"], rng)
    val_ids = _held_out(mixed, unsolved, level_of, n_heldout)
    train_mixed = [iid for iid in mixed if iid not in val_ids][:n_mixed]
    train_unsolved = [iid for iid in unsolved if iid not in val_ids][:n_unsolved]
    val = [iid for iid in mixed if iid in val_ids] + [iid for iid in unsolved if iid in val_ids]
    train = train_mixed + train_unsolved
    rng.shuffle(val)
    rng.shuffle(train)
    val_mixed = sum(difficulty[iid] == "mixed" for iid in val)
    counts = DifficultyCounts(probed=len(outcomes), solved=len(outcomes) - len(mixed) - len(unsolved),
                              mixed=len(mixed), unsolved=len(unsolved), train_mixed=len(train_mixed),
                              train_unsolved=len(train_unsolved), val_mixed=val_mixed,
                              val_unsolved=len(val) - val_mixed,
                              levels=level_counts(difficulty, level_of, train, val) if levels is not None else {})
    return DifficultySplit(train, val, difficulty, solved, counts, k, seed)


def _held_out(mixed: list[str], unsolved: list[str], level_of: Mapping[str, int], n_heldout: int) -> set[str]:
    """The held-out ids: `n_heldout` shared among levels by their non-trivial pool sizes (largest remainders first),
    each level's share stratified by class (`stratified_take`), each list taken from its front."""
    pools = {level: ([i for i in mixed if level_of[i] == level], [i for i in unsolved if level_of[i] == level])
             for level in sorted(set(level_of[i] for i in mixed + unsolved))}
    total = len(mixed) + len(unsolved)
    if total == 0:
        return set()
    n = min(n_heldout, total)
    exact = {level: n * (len(m) + len(u)) / total for level, (m, u) in pools.items()}
    takes = {level: int(share) for level, share in exact.items()}
    for level in sorted(exact, key=lambda lv: (-(exact[lv] - takes[lv]), lv))[:n - sum(takes.values())]:
        takes[level] += 1
    held: set[str] = set()
    for level, (level_mixed, level_unsolved) in pools.items():
        take_mixed, take_unsolved = stratified_take(takes[level], len(level_mixed), len(level_unsolved))
        held.update(level_mixed[:take_mixed] + level_unsolved[:take_unsolved])
    return held


def level_counts(difficulty: Mapping[str, Difficulty], level_of: Mapping[str, int], train: Sequence[str],
                 val: Sequence[str]) -> dict[int, dict[str, int]]:
    """Per level: tasks probed, each class, and how many went to training and validation."""
    counts: dict[int, dict[str, int]] = {}
    for iid, cls in difficulty.items():
        level = counts.setdefault(level_of[iid], {"probed": 0, "solved": 0, "mixed": 0, "unsolved": 0, "train": 0,
                                                   "val": 0})
        level["probed"] += 1
        level[cls] += 1
    for name, ids in (("train", train), ("val", val)):
        for iid in ids:
            counts[level_of[iid]][name] += 1
    return dict(sorted(counts.items()))
