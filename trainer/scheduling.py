"""Rollout-atomic scheduling of samples onto optimizer updates, workers and micro-batches.

1. Rollouts (all their samples together) are split into `num_updates` optimizer updates, balanced
   by tokens: a rollout never spans two updates, so its rollout-level loss denominators are whole.
2. Within an update, sequences are balanced across `num_workers` by tokens with the
   Karmarkar-Karp largest differencing method (or, for comparison, greedy placement in arrival
   order onto the least-loaded worker).
3. Each worker's sequences become micro-batches under `max_tokens_per_micro_batch`: "packed"
   (first-fit decreasing into rows of concatenated sequences), "padded" (longest first, rows of
   equal length, the budget counting padding) or "shared_prefix" (padded rows, but the samples of a
   prefix family, `trainer.shared_prefix`, run their shared prefix once: a prefix row per family and
   a suffix row per sample). A sequence longer than the budget gets its own micro-batch and is counted.

Slots are the token positions a micro-batch computes: its row(s) rounded up to `pad_to_multiple`.
Padding waste is 1 - tokens / slots. Load is measured in tokens (attention's quadratic term is
not modelled).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from trainer.shared_prefix import PrefixSequence, prefix_families

Balancer = Literal["karmarkar_karp", "greedy"]
"""How sequences are spread over workers."""

Layout = Literal["packed", "padded", "shared_prefix"]
"""How sequences share a micro-batch."""

LAYOUTS: tuple[str, ...] = ("packed", "padded", "shared_prefix")


class Schedulable(Protocol):
    """What scheduling needs from a sample (a `trainer.samples.Sample` is one)."""

    @property
    def rollout_id(self) -> str: ...

    @property
    def num_tokens(self) -> int: ...


@dataclass(frozen=True)
class ScheduleConfig:
    """How one training step's samples are laid out."""

    num_workers: int = 1
    """Data-parallel workers."""
    num_updates: int = 1
    """Optimizer updates per step (mini-batches); rollouts are never split across them."""
    max_tokens_per_micro_batch: int = 8192
    """Token budget of a micro-batch (slots, padding included)."""
    layout: Layout = "packed"
    """packed: concatenated rows; padded: one sequence per row; shared_prefix: padded, a prefix family's shared
    prefix run once (the samples must carry token ids and loss masks)."""
    balancer: Balancer = "karmarkar_karp"
    """Worker balancing method."""
    pad_to_multiple: int = 1
    """Rows are rounded up to a multiple of this many tokens (kernel tiles)."""

    def __post_init__(self) -> None:
        for name in ("num_workers", "num_updates", "max_tokens_per_micro_batch", "pad_to_multiple"):
            if getattr(self, name) < 1:
                raise ValueError(f"ScheduleConfig.{name}={getattr(self, name)}: use a positive integer")
        if self.layout not in LAYOUTS:
            raise ValueError(f"ScheduleConfig.layout={self.layout!r}: use one of {', '.join(LAYOUTS)}")
        if self.balancer not in ("karmarkar_karp", "greedy"):
            raise ValueError(f"ScheduleConfig.balancer={self.balancer!r}: use 'karmarkar_karp' or 'greedy'")


@dataclass(frozen=True)
class ScheduledSequence:
    """One sample's place in a micro-batch, with its provenance."""

    sample_index: int
    """Index of the sample in the scheduled sequence list."""
    rollout_id: str
    """Rollout the sample came from."""
    num_tokens: int
    """Its length."""
    offset: int
    """Start position in the packed row, or the row index when padded (shared_prefix: its suffix row)."""


@dataclass(frozen=True)
class MicroBatch:
    """Sequences processed in one forward/backward pass."""

    sequences: tuple[ScheduledSequence, ...]
    """Sequences, in row order."""
    num_tokens: int
    """Real tokens."""
    slots: int
    """Token positions computed, padding included."""
    shared_tokens: int = 0
    """Sample tokens not computed because a prefix family ran them once (shared_prefix layout)."""


@dataclass(frozen=True)
class WorkerPlan:
    """One worker's share of an update."""

    micro_batches: tuple[MicroBatch, ...]
    """Its micro-batches, in order."""
    load_tokens: int
    """Real tokens it processes."""


@dataclass(frozen=True)
class UpdatePlan:
    """One optimizer update."""

    rollout_ids: tuple[str, ...]
    """Rollouts whose samples are all in this update."""
    workers: tuple[WorkerPlan, ...]
    """One plan per worker."""

    @property
    def imbalance(self) -> float:
        """Max over mean worker load (1.0 is perfect balance)."""
        loads = [worker.load_tokens for worker in self.workers]
        mean = sum(loads) / len(loads)
        return max(loads) / mean if mean else 1.0


@dataclass(frozen=True)
class Schedule:
    """A training step's layout and its quality figures."""

    updates: tuple[UpdatePlan, ...]
    """Optimizer updates, in order."""
    metrics: Mapping[str, float]
    """Imbalance, padding waste, micro-batch counts; keys prefixed "schedule/"."""


def karmarkar_karp(loads: Sequence[int], num_parts: int) -> list[list[int]]:
    """Split item indices into `num_parts` subsets of near-equal total load (largest differencing method).

    Partial partitions are kept in a heap keyed by their spread (max - min subset load); the two
    widest are merged, largest subset with smallest, until one partition remains.
    """
    tie = itertools.count()
    heap: list[tuple[int, int, list[tuple[int, tuple]]]] = []
    for index, load in enumerate(loads):
        subsets = [(load, (index,))] + [(0, ())] * (num_parts - 1)
        heap.append((-load, next(tie), subsets))
    heapq.heapify(heap)
    while len(heap) > 1:
        _, _, first = heapq.heappop(heap)
        _, _, second = heapq.heappop(heap)
        merged = [
            (a + b, (items_a, items_b))
            for (a, items_a), (b, items_b) in zip(first, reversed(second), strict=True)
        ]
        merged.sort(key=lambda subset: -subset[0])
        heapq.heappush(heap, (merged[-1][0] - merged[0][0], next(tie), merged))
    final = heap[0][2] if heap else [(0, ())] * num_parts
    return [sorted(_flatten(items)) for _, items in final]


def _flatten(tree: tuple) -> list[int]:
    """Leaves of the nested item tuples built while merging (iterative: trees can be deep)."""
    leaves: list[int] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        for child in node:
            if isinstance(child, tuple):
                stack.append(child)
            else:
                leaves.append(child)
    return leaves


def greedy_partition(loads: Sequence[int], num_parts: int) -> list[list[int]]:
    """Items in arrival order, each onto the currently least-loaded subset (the baseline)."""
    heap = [(0, part) for part in range(num_parts)]
    parts: list[list[int]] = [[] for _ in range(num_parts)]
    for index, load in enumerate(loads):
        total, part = heapq.heappop(heap)
        parts[part].append(index)
        heapq.heappush(heap, (total + load, part))
    return parts


def schedule(sequences: Sequence[Schedulable], config: ScheduleConfig = ScheduleConfig()) -> Schedule:
    """Lay out a step's samples: rollout-atomic updates, balanced workers, budgeted micro-batches."""
    by_rollout: dict[str, list[int]] = {}
    for index, seq in enumerate(sequences):
        by_rollout.setdefault(seq.rollout_id, []).append(index)
    rollout_ids = list(by_rollout)
    rollout_loads = [sum(sequences[i].num_tokens for i in by_rollout[rid]) for rid in rollout_ids]
    updates = []
    for part in karmarkar_karp(rollout_loads, config.num_updates):
        members = [rollout_ids[r] for r in part]
        indices = sorted(i for rid in members for i in by_rollout[rid])
        updates.append(_plan_update(sequences, members, indices, config))
    return Schedule(tuple(updates), _metrics(updates, config))


def _plan_update(
    sequences: Sequence[Schedulable], rollout_ids: list[str], indices: list[int], config: ScheduleConfig
) -> UpdatePlan:
    loads = [sequences[i].num_tokens for i in indices]
    balance = karmarkar_karp if config.balancer == "karmarkar_karp" else greedy_partition
    workers = []
    for part in balance(loads, config.num_workers):
        worker_indices = [indices[p] for p in part]
        micro_batches = _micro_batches(sequences, worker_indices, config)
        workers.append(WorkerPlan(micro_batches, sum(mb.num_tokens for mb in micro_batches)))
    return UpdatePlan(tuple(rollout_ids), tuple(workers))


def _round_up(tokens: int, multiple: int) -> int:
    return -(-tokens // multiple) * multiple


def _micro_batches(
    sequences: Sequence[Schedulable], indices: list[int], config: ScheduleConfig
) -> tuple[MicroBatch, ...]:
    if config.layout == "shared_prefix":
        return shared_prefix_micro_batches(sequences, indices, config)  # type: ignore[arg-type]
    ordered = sorted(indices, key=lambda i: (-sequences[i].num_tokens, i))
    rows = (
        _pack_first_fit(sequences, ordered, config)
        if config.layout == "packed"
        else _pad_longest_first(sequences, ordered, config)
    )
    return tuple(_micro_batch(sequences, row, config) for row in rows)


def _pack_first_fit(
    sequences: Sequence[Schedulable], ordered: list[int], config: ScheduleConfig
) -> list[list[int]]:
    """First-fit decreasing: each sequence into the first row with room for it (rounded row length)."""
    budget, multiple = config.max_tokens_per_micro_batch, config.pad_to_multiple
    rows: list[list[int]] = []
    used: list[int] = []
    for index in ordered:
        length = sequences[index].num_tokens
        for row, row_used in enumerate(used):
            if _round_up(row_used + length, multiple) <= budget:
                rows[row].append(index)
                used[row] += length
                break
        else:
            rows.append([index])
            used.append(length)
    return rows


def _pad_longest_first(
    sequences: Sequence[Schedulable], ordered: list[int], config: ScheduleConfig
) -> list[list[int]]:
    """Longest first: a micro-batch takes rows while rows x its (first, longest) row length fits."""
    batches: list[list[int]] = []
    for index in ordered:
        if batches:
            width = _round_up(sequences[batches[-1][0]].num_tokens, config.pad_to_multiple)
            if (len(batches[-1]) + 1) * width <= config.max_tokens_per_micro_batch:
                batches[-1].append(index)
                continue
        batches.append([index])
    return batches


def _micro_batch(sequences: Sequence[Schedulable], members: list[int], config: ScheduleConfig) -> MicroBatch:
    lengths = [sequences[i].num_tokens for i in members]
    if config.layout == "packed":
        offsets = list(itertools.accumulate([0, *lengths[:-1]]))
        slots = _round_up(sum(lengths), config.pad_to_multiple)
    else:
        offsets = list(range(len(members)))
        slots = len(members) * _round_up(max(lengths), config.pad_to_multiple)
    scheduled = tuple(
        ScheduledSequence(i, sequences[i].rollout_id, n, offset)
        for i, n, offset in zip(members, lengths, offsets, strict=True)
    )
    return MicroBatch(scheduled, sum(lengths), slots)


def _metrics(updates: list[UpdatePlan], config: ScheduleConfig) -> dict[str, float]:
    micro_batches = [mb for update in updates for worker in update.workers for mb in worker.micro_batches]
    per_worker = [len(worker.micro_batches) for update in updates for worker in update.workers]
    tokens = sum(mb.num_tokens for mb in micro_batches)
    shared = sum(mb.shared_tokens for mb in micro_batches)
    slots = sum(mb.slots for mb in micro_batches)
    budget = config.max_tokens_per_micro_batch
    return {
        "schedule/updates": float(len(updates)),
        "schedule/sequences": float(sum(len(mb.sequences) for mb in micro_batches)),
        "schedule/tokens": float(tokens),
        "schedule/imbalance_max": max((update.imbalance for update in updates), default=1.0),
        "schedule/padding_waste": 1.0 - (tokens - shared) / slots if slots else 0.0,
        "schedule/shared_prefix_tokens": float(shared),
        "schedule/budget_fill": tokens / (len(micro_batches) * budget) if micro_batches else 0.0,
        "schedule/micro_batches": float(len(micro_batches)),
        "schedule/micro_batches_per_worker_max": float(max(per_worker, default=0)),
        "schedule/micro_batches_per_worker_min": float(min(per_worker, default=0)),
        "schedule/over_budget_sequences": float(sum(1 for mb in micro_batches if mb.slots > budget)),
    }


def shared_prefix_micro_batches(
    sequences: Sequence[PrefixSequence], indices: list[int], config: ScheduleConfig
) -> tuple[MicroBatch, ...]:
    """Families longest first, each member longest suffix first; a micro-batch takes members while its prefix rows
    (one per family present) and suffix rows, each padded to its longest, fit the budget. A family split over
    micro-batches runs its prefix in each."""
    families = prefix_families(sequences, indices)
    family_of = {i: f for f, family in enumerate(families) for i in family.members}
    prefix_of = {i: families[f].prefix_len for i, f in family_of.items()}
    suffix_of = {i: sequences[i].num_tokens - prefix_of[i] for i in family_of}  # type: ignore[attr-defined]
    order = sorted(range(len(families)),
                   key=lambda f: (-(families[f].prefix_len + max(suffix_of[i] for i in families[f].members)), f))
    batches: list[list[int]] = []
    for f in order:
        for index in sorted(families[f].members, key=lambda i: (-suffix_of[i], i)):
            if batches and _shared_slots(batches[-1] + [index], family_of, prefix_of, suffix_of, config) <= \
                    config.max_tokens_per_micro_batch:
                batches[-1].append(index)
            else:
                batches.append([index])
    return tuple(_shared_micro_batch(sequences, members, family_of, prefix_of, suffix_of, config)
                 for members in batches)


def _shared_slots(members: list[int], family_of: dict[int, int], prefix_of: dict[int, int],
                  suffix_of: dict[int, int], config: ScheduleConfig) -> int:
    """Positions computed: a prefix row per family present and a suffix row per member, each padded to its longest."""
    multiple = config.pad_to_multiple
    prefix_width = _round_up(max(prefix_of[i] for i in members), multiple)
    suffix_width = _round_up(max(suffix_of[i] for i in members), multiple)
    return len({family_of[i] for i in members}) * prefix_width + len(members) * suffix_width


def _shared_micro_batch(sequences: Sequence[PrefixSequence], members: list[int], family_of: dict[int, int],
                        prefix_of: dict[int, int], suffix_of: dict[int, int], config: ScheduleConfig) -> MicroBatch:
    lengths = [prefix_of[i] + suffix_of[i] for i in members]
    firsts = {family_of[i]: i for i in reversed(members)}
    shared = sum(prefix_of[i] for i in members) - sum(prefix_of[i] for i in firsts.values())
    scheduled = tuple(
        ScheduledSequence(i, sequences[i].rollout_id, n, row)  # type: ignore[attr-defined]
        for row, (i, n) in enumerate(zip(members, lengths, strict=True))
    )
    slots = _shared_slots(members, family_of, prefix_of, suffix_of, config)
    return MicroBatch(scheduled, sum(lengths), slots, shared)
