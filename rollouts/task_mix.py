"""A constant, stratified task mix per iteration: every batch holds the same number of groups of each stratum.

The training tasks are split into strata by one field (`level` of the SWE difficulty ladder; tasks without it form
one stratum). `plan_mix` gives each stratum a quota of groups per batch in proportion to its share of the tasks
(largest remainders first), and refuses a plan where a stratum's share would round to no group at all (its tasks
would never be trained on) or where a batch cannot hold one group of each stratum. `task_at` maps a task index of
the run's stream to a row: block `index // batch_groups` holds each stratum's quota of positions (interleaved), and
the k-th position of a stratum in the run takes that stratum's row `k mod size`, so each stratum cycles through its
own rows in their order. A pure function of the index: a resumed run resubmits the same task for the same index.

The feed (`rollouts/feed.py`) takes a batch by the same quotas (each stratum's earliest complete groups),
so a stratum that finishes faster does not crowd the batch under the asynchronous schedule.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, count
from typing import Any

STRATUM_FIELD = "level"
"""The task field that names a task's stratum (the SWE ladder level)."""


def stratum_of(task: Mapping[str, Any], field: str = STRATUM_FIELD) -> str:
    """The stratum of `task`: the text of its `field` ("" when absent or None: one stratum for tasks without it)."""
    value = task.get(field)
    return "" if value is None else str(value)


@dataclass(frozen=True)
class TaskMix:
    """Groups per batch of each stratum and the rows each stratum cycles through."""

    batch_groups: int
    quotas: Mapping[str, int]
    """stratum -> groups per batch (they sum to `batch_groups`)."""
    rows: Mapping[str, tuple[int, ...]]
    """stratum -> the indices of its rows in the training rows, in their order."""
    slots: tuple[str, ...]
    """The stratum of each position of a batch's block of task indices (interleaved)."""
    field: str = STRATUM_FIELD


def largest_remainder_quotas(sizes: Mapping[str, int], seats: int) -> dict[str, int]:
    """`seats` shared among the keys in proportion to `sizes` (Hamilton's method: the integer parts, then one more
    seat each by largest remainder, ties by key)."""
    total = sum(sizes.values())
    if total <= 0 or seats < 0:
        raise ValueError(f"cannot share {seats} seats among sizes {dict(sizes)}: need a positive total")
    exact = {key: seats * size / total for key, size in sizes.items()}
    quotas = {key: int(share) for key, share in exact.items()}
    for key in sorted(exact, key=lambda k: (-(exact[k] - quotas[k]), k))[:seats - sum(quotas.values())]:
        quotas[key] += 1
    return quotas


def interleaved_slots(quotas: Mapping[str, int]) -> tuple[str, ...]:
    """The positions of a block, each stratum's spread evenly: position j of a stratum with quota q sits at
    (j + 1/2) / q of the block (ties by stratum), so a block submitted in order starts every stratum early."""
    marks = sorted(((j + 0.5) / quota, key) for key, quota in quotas.items() for j in range(quota))
    return tuple(key for _, key in marks)


def plan_mix(rows: Sequence[Mapping[str, Any]], batch_groups: int, field: str = STRATUM_FIELD) -> TaskMix:
    """The constant per-batch mix of `rows` by `field`; ValueError naming the fix when a stratum would get no group
    in a batch of `batch_groups`."""
    if batch_groups < 1:
        raise ValueError(f"batch_groups={batch_groups} must be >= 1")
    if not rows:
        raise ValueError("no training tasks: check data.source and data.train_tasks")
    strata: dict[str, list[int]] = {}
    for index, row in enumerate(rows):
        strata.setdefault(stratum_of(row, field), []).append(index)
    quotas = largest_remainder_quotas({key: len(indices) for key, indices in strata.items()}, batch_groups)
    starved = sorted(key for key, quota in quotas.items() if quota == 0)
    if starved:
        shares = ", ".join(f"{field}={key or 'none'}: {len(strata[key])}" for key in sorted(strata))
        raise ValueError(f"a batch of {batch_groups} groups cannot hold every {field} at its share of the "
                         f"{len(rows)} training tasks ({shares}): {field} {starved} would get no group and never be "
                         f"trained on; make each {field}'s share times rollout.batch_groups whole (e.g. the "
                         "generator's level shares) or raise rollout.batch_groups")
    return TaskMix(batch_groups, quotas, {key: tuple(indices) for key, indices in strata.items()},
                   interleaved_slots(quotas), field)


def task_at(mix: TaskMix, index: int) -> int:
    """The row index of the run's task `index` (see the module docstring)."""
    if index < 0:
        raise ValueError(f"task index {index} must be >= 0")
    block, position = divmod(index, mix.batch_groups)
    stratum = mix.slots[position]
    rank = mix.slots[:position].count(stratum)
    rows = mix.rows[stratum]
    return rows[(block * mix.quotas[stratum] + rank) % len(rows)]


def mix_stream(rows: Sequence[dict], mix: TaskMix, start: int,
               reopen: Sequence[int] = ()) -> Iterator[tuple[int, dict]]:
    """(index, task): first the `reopen` indices (groups a resumed run had open), then from `start` on, each index's
    task by `task_at` (index keeps counting: ids stay unique)."""
    for index in chain(reopen, count(start)):
        yield index, rows[task_at(mix, index)]


def batch_counts(tasks: Sequence[Mapping[str, Any]], field: str = STRATUM_FIELD) -> dict[str, int]:
    """Groups per stratum among `tasks` (one batch's tasks): what `TaskMix.quotas` promises."""
    counts: dict[str, int] = {}
    for task in tasks:
        key = stratum_of(task, field)
        counts[key] = counts.get(key, 0) + 1
    return counts


def take_by_quota(strata: Sequence[str], quotas: Mapping[str, int], batches: int = 1) -> list[int] | None:
    """The positions (in `strata`, the ready groups' strata in completion order) of each stratum's earliest
    `batches * quota` groups, in completion order; None while some stratum has fewer ready."""
    wanted = {key: quota * batches for key, quota in quotas.items()}
    taken: list[int] = []
    for position, key in enumerate(strata):
        if wanted.get(key, 0) > 0:
            wanted[key] -= 1
            taken.append(position)
    return None if any(left > 0 for left in wanted.values()) else taken
