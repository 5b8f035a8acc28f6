"""Scheduling: balancing, rollout-atomic updates, packing and padding, coverage properties."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.scheduling import ScheduleConfig, greedy_partition, karmarkar_karp, schedule


@dataclass(frozen=True)
class Seq:
    """A minimal Schedulable."""

    rollout_id: str
    num_tokens: int
    family: int = 0
    """Sequences of one family and length share their first half (the shared_prefix layout's prefix families)."""

    @property
    def token_ids_T(self) -> np.ndarray:
        return np.arange(self.num_tokens) + 1000 * self.family

    @property
    def loss_mask_T(self) -> np.ndarray:
        return np.arange(self.num_tokens) >= max(1, self.num_tokens // 2)


def sums(loads, parts):
    return sorted(sum(loads[i] for i in part) for part in parts)


@pytest.mark.parametrize(
    ("loads", "parts", "kk", "greedy"),
    [
        ([8, 7, 6, 5, 4], 2, [14, 16], [13, 17]),
        ([1, 1, 1, 1, 1, 1, 10], 2, [6, 10], [3, 13]),
        ([5, 5, 4, 3, 3], 3, [5, 7, 8], [5, 7, 8]),
        ([3], 4, [0, 0, 0, 3], [0, 0, 0, 3]),
        ([], 2, [0, 0], [0, 0]),
    ],
)
def test_partition_sums(loads, parts, kk, greedy):
    assert sums(loads, karmarkar_karp(loads, parts)) == kk
    assert sums(loads, greedy_partition(loads, parts)) == greedy


def test_packed_micro_batches_use_first_fit_decreasing_under_the_budget():
    seqs = [Seq("a", 6), Seq("a", 5), Seq("b", 4), Seq("c", 3), Seq("c", 2)]
    plan = schedule(seqs, ScheduleConfig(max_tokens_per_micro_batch=10))
    (worker,) = plan.updates[0].workers
    rows = [[s.sample_index for s in mb.sequences] for mb in worker.micro_batches]
    assert rows == [[0, 2], [1, 3, 4]]
    assert [[s.offset for s in mb.sequences] for mb in worker.micro_batches] == [[0, 6], [0, 5, 8]]
    assert plan.metrics["schedule/padding_waste"] == 0.0
    assert plan.metrics["schedule/budget_fill"] == pytest.approx(20 / 20)


def test_padded_micro_batches_count_padding_in_the_budget_and_as_waste():
    seqs = [Seq("a", 6), Seq("a", 5), Seq("b", 4), Seq("c", 3), Seq("c", 2)]
    plan = schedule(seqs, ScheduleConfig(max_tokens_per_micro_batch=12, layout="padded"))
    (worker,) = plan.updates[0].workers
    assert [[s.sample_index for s in mb.sequences] for mb in worker.micro_batches] == [[0, 1], [2, 3, 4]]
    assert [mb.slots for mb in worker.micro_batches] == [12, 12]
    assert plan.metrics["schedule/padding_waste"] == pytest.approx(1 - 20 / 24)


def test_rows_round_up_to_the_padding_multiple():
    plan = schedule(
        [Seq("a", 5), Seq("b", 2)], ScheduleConfig(max_tokens_per_micro_batch=8, pad_to_multiple=4)
    )
    micro_batches = plan.updates[0].workers[0].micro_batches
    assert [(mb.num_tokens, mb.slots) for mb in micro_batches] == [(7, 8)]


def test_over_budget_sequence_gets_its_own_micro_batch_and_is_counted():
    plan = schedule([Seq("a", 20), Seq("b", 3)], ScheduleConfig(max_tokens_per_micro_batch=10))
    rows = [[s.sample_index for s in mb.sequences] for mb in plan.updates[0].workers[0].micro_batches]
    assert rows == [[0], [1]] and plan.metrics["schedule/over_budget_sequences"] == 1


def test_workers_are_balanced_and_imbalance_reported():
    seqs = [Seq(f"r{i}", n) for i, n in enumerate([8, 7, 6, 5, 4])]
    kk = schedule(seqs, ScheduleConfig(num_workers=2))
    greedy = schedule(seqs, ScheduleConfig(num_workers=2, balancer="greedy"))
    assert sorted(w.load_tokens for w in kk.updates[0].workers) == [14, 16]
    assert kk.metrics["schedule/imbalance_max"] == pytest.approx(16 / 15)
    assert greedy.metrics["schedule/imbalance_max"] == pytest.approx(17 / 15)


@pytest.mark.parametrize(
    "config",
    [
        {"num_workers": 0},
        {"num_updates": 0},
        {"max_tokens_per_micro_batch": 0},
        {"pad_to_multiple": 0},
        {"layout": "ragged"},
        {"balancer": "random"},
    ],
)
def test_invalid_config_is_rejected(config):
    with pytest.raises(ValueError, match="ScheduleConfig"):
        ScheduleConfig(**config)


sequence_lists = st.lists(st.tuples(st.integers(0, 9), st.integers(1, 60), st.integers(0, 2)), max_size=40)
configs = st.builds(
    ScheduleConfig,
    num_workers=st.integers(1, 4),
    num_updates=st.integers(1, 3),
    max_tokens_per_micro_batch=st.integers(16, 128),
    layout=st.sampled_from(["packed", "padded", "shared_prefix"]),
    balancer=st.sampled_from(["karmarkar_karp", "greedy"]),
    pad_to_multiple=st.sampled_from([1, 8]),
)


@settings(max_examples=200, deadline=None)
@given(sequence_lists, configs)
def test_every_sample_scheduled_once_and_no_rollout_split_across_updates(rows, config):
    seqs = [Seq(f"r{rollout}", n, family) for rollout, n, family in rows]
    plan = schedule(seqs, config)
    placed = [s for u in plan.updates for w in u.workers for mb in w.micro_batches for s in mb.sequences]
    assert sorted(s.sample_index for s in placed) == list(range(len(seqs)))
    assert all(seqs[s.sample_index].rollout_id == s.rollout_id for s in placed)
    update_of = {}
    for u_index, update in enumerate(plan.updates):
        assert len(update.workers) == config.num_workers
        for worker in update.workers:
            assert worker.load_tokens == sum(mb.num_tokens for mb in worker.micro_batches)
            for mb in worker.micro_batches:
                assert mb.slots <= config.max_tokens_per_micro_batch or len(mb.sequences) == 1
                assert mb.slots >= mb.num_tokens - mb.shared_tokens
                assert mb.num_tokens == sum(s.num_tokens for s in mb.sequences)
                assert mb.shared_tokens == 0 or config.layout == "shared_prefix"
                for s in mb.sequences:
                    assert update_of.setdefault(s.rollout_id, u_index) == u_index
                    assert s.rollout_id in update.rollout_ids
    assert len(plan.updates) == config.num_updates


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 1000), max_size=60), st.integers(1, 6))
def test_karmarkar_karp_covers_every_item_with_spread_at_most_the_largest_item(loads, parts):
    kk_parts = karmarkar_karp(loads, parts)
    assert sorted(i for part in kk_parts for i in part) == list(range(len(loads)))
    assert len(kk_parts) == parts
    # Merging a descending with an ascending partition never widens the larger spread.
    kk_sums = sums(loads, kk_parts)
    assert kk_sums[-1] - kk_sums[0] <= max(loads, default=0)


def test_a_prefix_family_runs_its_prefix_once_in_each_micro_batch_it_is_in():
    # Three sequences of family 0 and length 10 share 4 tokens (prefix end 4: the first trainable token is 5th);
    # one of family 1 shares nothing with them.
    seqs = [Seq("a", 10), Seq("b", 10), Seq("c", 10), Seq("d", 10, family=1)]
    whole = schedule(seqs, ScheduleConfig(max_tokens_per_micro_batch=100, layout="shared_prefix"))
    (mb,) = whole.updates[0].workers[0].micro_batches
    assert mb.shared_tokens == 2 * 4 and mb.slots == 2 * 4 + 4 * 6  # two prefix rows, four suffix rows of 6
    assert whole.metrics["schedule/shared_prefix_tokens"] == 8 and whole.metrics["schedule/padding_waste"] == 0
    split = schedule(seqs, ScheduleConfig(max_tokens_per_micro_batch=16, layout="shared_prefix"))
    batches = [[s.sample_index for s in mb.sequences] for mb in split.updates[0].workers[0].micro_batches]
    assert batches == [[0, 1], [2], [3]]  # 4 + 2 x 6 = 16 fits, a third member would not
    assert [mb.shared_tokens for mb in split.updates[0].workers[0].micro_batches] == [4, 0, 0]
