"""benchmarks/ablation_report.py: the t-intervals, paired differences and the rendered table, on synthetic numbers."""

from __future__ import annotations

import math

import pytest

from benchmarks.ablation_report import (
    END,
    START,
    arm_differences,
    arm_order,
    paired_differences,
    render,
    split_spread_lines,
    t_interval,
    with_report,
)
from tracking.learning_stats import holm

T_975_DF2 = 4.302652729749462  # Student t quantile 0.975 with 2 degrees of freedom (tables: 4.303)
T_975_DF4 = 2.7764451051977934  # ... with 4 degrees of freedom (tables: 2.776)


def test_t_interval_of_three_values():
    interval = t_interval([1.0, 2.0, 3.0])  # mean 2, sample sd 1
    half = T_975_DF2 / math.sqrt(3)
    assert interval.n == 3 and interval.mean == 2.0
    assert interval.low == pytest.approx(2.0 - half, abs=1e-12) and interval.high == pytest.approx(2.0 + half,
                                                                                                    abs=1e-12)
    assert interval.high == pytest.approx(4.484138, abs=1e-6)


def test_t_interval_of_five_seeds():
    interval = t_interval([0.30, 0.35, 0.40, 0.45, 0.50])  # mean 0.4, sample sd sqrt(0.00625)
    half = T_975_DF4 * math.sqrt(0.00625) / math.sqrt(5)
    assert interval.mean == pytest.approx(0.4) and interval.low == pytest.approx(0.4 - half)
    assert half == pytest.approx(0.098162, abs=1e-6)


def test_t_interval_of_one_value_has_no_interval_and_none_is_refused():
    one = t_interval([0.7])
    assert one.mean == 0.7 and math.isnan(one.low) and math.isnan(one.high)
    with pytest.raises(ValueError, match="at least one"):
        t_interval([])


def test_paired_differences_use_the_seeds_both_arms_have_in_seed_order():
    first = {2: 0.4, 0: 0.5, 1: 0.7}
    second = {0: 0.3, 1: 0.4, 2: 0.5, 3: 0.9}
    assert paired_differences(first, second) == pytest.approx([0.2, 0.3, -0.1])
    assert paired_differences({0: 1.0}, {1: 1.0}) == []


def test_arm_order_puts_the_report_arms_first():
    assert arm_order(["zeta", "rollout-adv+token-mean", "rollout-adv+rollout-token-mean", "alpha"]) == [
        "rollout-adv+rollout-token-mean", "rollout-adv+token-mean", "alpha", "zeta"]


def test_render_shows_means_intervals_differences_and_the_report_numbers():
    finals = {"rollout-adv+rollout-token-mean": {0: 0.5, 1: 0.6, 2: 0.7},
              "sample-adv+token-mean": {0: 0.4, 1: 0.5, 2: 0.7},
              "rollout-adv+token-mean": {0: 0.3, 1: 0.5}}
    text = render("abl", "ablation", finals)
    half = T_975_DF2 * 0.1 / math.sqrt(3)
    assert f"| rollout-adv+rollout-token-mean | 3 | 0.600 | [{0.6 - half:.3f}, {0.6 + half:.3f}] | 38.2 |" in text
    assert "| rollout-adv+token-mean | 2 | 0.400 |" in text and "| 33.1 |" in text
    # paired a - b: [0.1, 0.1, 0.0] -> mean 0.0667; a - c over seeds 0, 1: [0.2, 0.1]
    assert "| rollout-adv+rollout-token-mean - sample-adv+token-mean | 3 | 0.067 |" in text and "| +3.2 |" in text
    assert "| rollout-adv+rollout-token-mean - rollout-adv+token-mean | 2 | 0.150 |" in text and "| +5.1 |" in text
    assert "| 2 | 0.700 | 0.700 |  |" in text  # seed 2 of the third arm is missing


def test_render_adds_each_runs_wall_time_and_the_total():
    finals = {"rollout-adv+rollout-token-mean": {0: 0.5, 1: 0.6}, "sample-adv+token-mean": {0: 0.4}}
    wall_s = {"rollout-adv+rollout-token-mean": {0: 400.4, 1: 380.0}, "sample-adv+token-mean": {0: 419.6}}
    text = render("abl", "ablation", finals, wall_s)
    assert "Wall time per run (s; 3 runs, 20.0 min in all, run after run):" in text
    assert "| 0 | 400 | 420 |" in text and "| 1 | 380 |  |" in text
    assert "Wall time" not in render("abl", "ablation", finals)
    assert "umbrella" not in text


@pytest.mark.parametrize(("flow_s", "line"), [
    ([6570.0], "The flow, start to end (its umbrella run, the gaps between runs included): 109.5 min."),
    ([3000.0, 1230.0], "The flow ran in 2 invocations (umbrella runs, the gaps between runs included): 50.0, 20.5 "
                       "min, 70.5 min in all."),
])
def test_render_adds_the_flows_own_wall_time(flow_s, line):
    finals = {"rollout-adv+rollout-token-mean": {0: 0.5}}
    assert line in render("abl", "ablation", finals, {"rollout-adv+rollout-token-mean": {0: 400.0}}, flow_s)


def test_the_report_replaces_only_the_marked_part_of_the_page():
    page = f"# Title\n\nDesign.\n\n{START}\nold table\n{END}\n\n## Measured\n\nHistory.\n"
    updated = with_report(page, "new table\n")
    assert updated == f"# Title\n\nDesign.\n\n{START}\nnew table\n{END}\n\n## Measured\n\nHistory.\n"
    assert with_report(updated, "new table\n") == updated
    assert with_report(updated, "newer\n").count(START) == 1 and "History." in with_report(updated, "newer\n")
    assert with_report("no markers here\n", "table\n") == f"no markers here\n\n{START}\ntable\n{END}\n"
    assert with_report(None, "table\n") == f"{START}\ntable\n{END}\n"


def test_the_arm_differences_carry_holm_adjusted_p_values_over_every_pair():
    finals = {"a": {0: 0.5, 1: 0.6, 2: 0.8, 3: 0.6}, "b": {0: 0.4, 1: 0.5, 2: 0.6, 3: 0.5},
              "c": {0: 0.5, 1: 0.4, 2: 0.9, 3: 0.5}}
    rows = arm_differences(["a", "b", "c"], finals)
    assert [pair for pair, _, _ in rows] == [("a", "b"), ("a", "c"), ("b", "c")]
    raw = [t_interval(paired_differences(finals[x], finals[y])).p for x, y in (("a", "b"), ("a", "c"), ("b", "c"))]
    assert [p for _, _, p in rows] == pytest.approx(holm(raw))
    assert all(p >= r for (_, _, p), r in zip(rows, raw, strict=True)), "an adjusted p is never below its raw p"
    assert min(raw) < 0.05, "the synthetic numbers make one pair significant alone"
    text = render("abl", "ablation", finals)
    assert "| p (Holm) |" in text and "| a - b | 4 | 0.125 |" in text
    one_seed = arm_differences(["a", "b"], {"a": {0: 0.5}, "b": {0: 0.4}})
    assert len(one_seed) == 1 and math.isnan(one_seed[0][2]), "one seed: no test, no p"


def test_the_split_spread_table_averages_each_arms_runs():
    spread = {"a": {0: (0.2, 0.5), 1: (0.4, 0.75)}, "b": {0: (0.0, 0.0)}}
    lines = split_spread_lines(["a", "b", "c"], spread)
    assert "| a | 2 | 0.300 | 0.62 |" in lines and "| b | 1 | 0.000 | 0.00 |" in lines
    assert not any(line.startswith("| c |") for line in lines), "an arm without the metrics has no row"
    assert "share of groups split unevenly" in render("abl", "ablation", {"a": {0: 0.5}}, spread=spread)
    assert "split unevenly" not in render("abl", "ablation", {"a": {0: 0.5}})
