"""The constant stratified task mix: quotas, the stream's blocks, the feed taking a batch by the quotas."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollouts.feed import FeedConfig, RolloutFeed
from rollouts.task_mix import (
    batch_counts,
    interleaved_slots,
    largest_remainder_quotas,
    mix_stream,
    plan_mix,
    take_by_quota,
    task_at,
)
from tests.trainer.loop_support import FakeGateway


def ladder(counts: dict[int | None, int]) -> list[dict]:
    """Rows with `counts[level]` tasks of each level, levels interleaved as a shuffled generator might."""
    rows = [{"id": f"l{level}-{i}", "level": level} for level, n in counts.items() for i in range(n)]
    return sorted(rows, key=lambda row: row["id"][::-1])


@pytest.mark.parametrize(("sizes", "seats", "quotas"), [
    ({"0": 12, "3": 4}, 4, {"0": 3, "3": 1}),
    ({"0": 8, "1": 4, "3": 4}, 4, {"0": 2, "1": 1, "3": 1}),
    ({"0": 12, "1": 2, "3": 2}, 8, {"0": 6, "1": 1, "3": 1}),
    ({"a": 1, "b": 1, "c": 1}, 2, {"a": 1, "b": 1, "c": 0}),  # ties by key
    ({"": 5}, 3, {"": 3}),
])
def test_largest_remainder_quotas(sizes, seats, quotas):
    assert largest_remainder_quotas(sizes, seats) == quotas


def test_make_train_levels_hold_the_same_mix_every_iteration():
    """issue 28: make train's batches held 8, 12, then 16 level-0 rollouts; with the mix every batch holds 3 level-0
    groups and 1 level-3 group, and each level cycles through all its tasks."""
    rows = ladder({0: 12, 3: 4})
    mix = plan_mix(rows, 4)
    assert mix.quotas == {"0": 3, "3": 1}
    stream = mix_stream(rows, mix, 0)
    batches = [[next(stream)[1] for _ in range(4)] for _ in range(4)]
    assert [batch_counts(batch) for batch in batches] == [{"0": 3, "3": 1}] * 4
    assert {row["id"] for batch in batches for row in batch} == {row["id"] for row in rows}


def test_a_stratum_that_would_get_no_group_is_refused_naming_the_fix():
    with pytest.raises(ValueError, match=r"level \['3'\] would get no group.*batch_groups"):
        plan_mix(ladder({0: 12, 1: 2, 3: 2}), 4)  # make train's profile before issue 28: 3 + 0.5 + 0.5 groups


def test_rows_without_the_field_are_one_stratum_and_cycle_in_order():
    rows = [{"id": i} for i in range(3)]
    mix = plan_mix(rows, 2)
    assert mix.quotas == {"": 2}
    assert [task_at(mix, i) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_slots_interleave_the_strata():
    assert interleaved_slots({"0": 3, "3": 1}) == ("0", "0", "3", "0")
    assert interleaved_slots({"0": 2, "1": 1, "3": 1}) == ("0", "1", "3", "0")


def test_a_resumed_stream_gives_the_same_tasks_for_the_same_indices():
    rows = ladder({0: 6, 1: 2})
    mix = plan_mix(rows, 4)
    fresh = dict(next(s) for s in [mix_stream(rows, mix, 0)] for _ in range(12))
    resumed = mix_stream(rows, mix, 9, reopen=[5, 7])
    assert [next(resumed) for _ in range(4)] == [(i, fresh[i]) for i in (5, 7, 9, 10)]


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=4), per_level=st.integers(1, 3),
       batches=st.integers(1, 6), start_block=st.integers(0, 5))
def test_every_block_holds_the_quotas_and_each_stratum_cycles_evenly(sizes, per_level, batches, start_block):
    """Property: with quotas that divide evenly (each stratum `per_level` groups a batch), every block of a batch's
    indices has exactly the quotas, and over the run a stratum's rows are used as evenly as its cycle allows."""
    rows = ladder({level: size * per_level for level, size in enumerate(sizes)})
    batch_groups = sum(sizes)
    mix = plan_mix(rows, batch_groups)
    assert mix.quotas == {str(level): size for level, size in enumerate(sizes)}
    start = start_block * batch_groups
    indices = range(start, start + batches * batch_groups)
    picked = [rows[task_at(mix, i)] for i in indices]
    for b in range(batches):
        assert batch_counts(picked[b * batch_groups:(b + 1) * batch_groups]) == dict(mix.quotas)
    uses = Counter(row["id"] for row in picked)
    for level in range(len(sizes)):
        counts = [uses[row["id"]] for row in rows if row["level"] == level]
        assert max(counts) - min(counts) <= 1


@pytest.mark.parametrize(("strata", "quotas", "batches", "taken"), [
    (["0", "0", "3", "0", "0"], {"0": 3, "3": 1}, 1, [0, 1, 2, 3]),
    (["0", "0", "0", "0", "3"], {"0": 3, "3": 1}, 1, [0, 1, 2, 4]),  # a fourth fast level-0 group waits
    (["0", "0", "0", "0"], {"0": 3, "3": 1}, 1, None),  # the level-3 group is not done yet
    (["3", "0", "0", "3", "0", "0", "0", "0"], {"0": 3, "3": 1}, 2, [0, 1, 2, 3, 4, 5, 6, 7]),
])
def test_take_by_quota(strata, quotas, batches, taken):
    assert take_by_quota(strata, quotas, batches) == taken


def test_the_feed_waits_for_each_strata_quota_and_leaves_the_surplus_ready():
    rows = ladder({0: 6, 3: 2})
    mix = plan_mix(rows, 4)
    gateway = FakeGateway()
    feed = RolloutFeed(gateway, FeedConfig(1, "run", mix=mix), mix_stream(rows, mix, 0))
    feed.submit(6, 0)  # indices 0-5: block 0 (three level 0, one level 3) and two level-0 of block 1
    level3 = next(i for i in range(6) if rows[task_at(mix, i)]["level"] == 3)
    for i in range(6):
        if i != level3:
            gateway.finish(f"run-{i}-0", 1.0)
    feed.poll(0.0)
    assert feed.ready == 5
    with pytest.raises(TimeoutError):
        feed.wait_for(4, timeout_s=0.0)
    gateway.finish(f"run-{level3}-0", 0.0)
    feed.wait_for(4, timeout_s=5.0, poll_s=0.0)
    batch = feed.take(4)
    assert batch_counts([group.task for group in batch]) == {"0": 3, "3": 1}
    assert feed.ready == 2 and all(group.task["level"] == 0 for group in feed.take(2))


def test_make_train_profile_plans_a_constant_mix():
    """swe-local's generator levels, split as the flow splits them, give every level a whole quota per batch."""
    from flows.config import load_run_config
    from recipes.swe.ladder import LadderMix, level_counts
    from rollouts.task_data import split_rows

    config = load_run_config("swe-local")
    data = config.data
    counts = level_counts(LadderMix(**data.generator), data.train_tasks + data.val_tasks)
    train, _ = split_rows(ladder(counts), data.val_tasks, data.seed, stratify="level")
    mix = plan_mix(train, config.rollout.batch_groups)
    assert sum(mix.quotas.values()) == config.rollout.batch_groups
    assert set(mix.quotas) == {str(level) for level in counts}
