"""The async-vs-sync benchmark's measurements: interval unions, device shares, duration spread."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.schedule_metrics import device_shares, spread_summary, union_length_s


@pytest.mark.parametrize(("intervals", "window", "length"), [
    ([], (0, 10), 0.0),
    ([(0, 2), (1, 3), (5, 6)], (0, 10), 4.0),  # overlap counted once
    ([(-5, 2), (8, 20)], (0, 10), 4.0),  # clipped at both ends
    ([(2, 3), (0, 10)], (0, 10), 10.0),  # one interval inside another
    ([(11, 12)], (0, 10), 0.0),
])
def test_union_length(intervals, window, length):
    assert union_length_s(intervals, *window) == pytest.approx(length)


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 30)).map(lambda t: (t[0], t[0] + t[1])), max_size=20),
       st.lists(st.tuples(st.floats(0, 100), st.floats(0, 30)).map(lambda t: (t[0], t[0] + t[1])), max_size=20))
def test_device_shares_partition_the_window(updates, calls):
    shares = device_shares(updates, calls, 0.0, 100.0)
    assert sum(shares.values()) == pytest.approx(1.0)
    assert all(-1e-9 <= value <= 1.0 + 1e-9 for value in shares.values())
    assert shares["update_share"] == pytest.approx(union_length_s(updates, 0.0, 100.0) / 100.0)


def test_device_shares_of_a_known_timeline():
    shares = device_shares(updates=[(8, 10)], calls=[(0, 4), (3, 4), (5, 7)], start_s=0.0, end_s=10.0)
    assert shares == pytest.approx({"update_share": 0.2, "generating_share": 0.6, "idle_share": 0.2})


def test_spread_summary_tail_ratios():
    summary = spread_summary([1.0] * 99 + [10.0])
    assert summary["median"] == 1.0 and summary["max_over_median"] == 10.0 and summary["count"] == 100.0
    assert spread_summary([]) == {}


@pytest.mark.parametrize("schedule", ["sync", "async"])
def test_the_benchmarks_run_config_is_valid(schedule, tmp_path, monkeypatch):
    """The benchmark builds the flow's own RunConfig: a renamed config key breaks it here, not after minutes."""
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "benchmarks"))  # a script imports its siblings
    from benchmarks.async_vs_sync import BenchSettings, run_config

    settings = BenchSettings(updates=2, batch_groups=1, group_size=2, inflight_groups=3, max_version_lag=2, calls=1,
                             median_s=1.0, sigma=0.5, cap=5.0, max_tokens=4, seed=0)
    config = run_config(settings, schedule, tmp_path)
    assert (config.rollout.schedule, config.backend.optimizer.lr) == (schedule, 1e-5)
