"""tracking/learning_stats.py: t-intervals and p-values against scipy, Holm's correction, the claims of a learning
experiment and the rerun spread, on known values."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from tracking.learning_stats import (
    at_step,
    band,
    claims,
    final_step,
    holm,
    paired,
    rerun_spread,
    t_interval,
)

T_975_DF2 = 4.302652729749462  # Student t quantile 0.975 with 2 degrees of freedom


@pytest.mark.parametrize("values", [[0.1, 0.3, 0.2], [0.5, -0.1, 0.2, 0.9], [1.0, 2.0], [-0.2, -0.25, -0.1, -0.3, 0.0]])
def test_t_interval_matches_scipy(values):
    interval = t_interval(values)
    low, high = stats.t.interval(0.95, len(values) - 1, loc=sum(values) / len(values), scale=stats.sem(values))
    assert (interval.low, interval.high) == pytest.approx((low, high), abs=1e-12)
    assert interval.p == pytest.approx(stats.ttest_1samp(values, 0.0).pvalue, abs=1e-12)


def test_t_interval_known_value_and_edge_cases():
    interval = t_interval([0.1, 0.3, 0.2])
    assert interval.mean == pytest.approx(0.2)
    assert interval.high - interval.mean == pytest.approx(T_975_DF2 * 0.1 / math.sqrt(3))
    one = t_interval([0.4])
    assert (one.n, one.mean) == (1, 0.4) and math.isnan(one.low) and math.isnan(one.p)
    assert t_interval([0.0, 0.0]).p == 1.0


@pytest.mark.parametrize(("values", "p"), [([0.0625] * 3, 0.25), ([-0.2] * 2, 0.5), ([0.1] * 6, 0.03125),
                                            ([0.0] * 5, 1.0)])
def test_values_without_spread_get_the_sign_tests_p_not_certainty(values, p):
    interval = t_interval(values)
    assert (interval.low, interval.mean, interval.high) == (values[0], values[0], values[0])
    assert interval.p == pytest.approx(p), "n equal differences: the exact sign test, 2 x 0.5^n"
    assert interval.p == pytest.approx(min(1.0, stats.binomtest(len(values), len(values)).pvalue)
                                       if values[0] else 1.0)
    with pytest.raises(ValueError):
        t_interval([])


def test_floating_point_summation_noise_is_no_spread():
    """A control's step-4 minus step-0 reward summed in another order: differences of about 1e-17 are exactly 0
    (p 1, not a t-test on noise), and equal gains that differ only in the last bits are alike (the sign test)."""
    rewards = [0.1, 0.2, 0.3, 0.05] * 16
    noise = [sum(rewards) / 64 - sum(reversed(rewards)) / 64, 0.0, -(sum(rewards[::2]) + sum(rewards[1::2])
                                                                     - sum(rewards)) / 64]
    assert any(value != 0.0 for value in noise), "the fixture must hold real summation noise"
    control = t_interval(noise)
    assert (control.mean, control.low, control.high, control.p) == (0.0, 0.0, 0.0, 1.0)
    gains = t_interval([1 / 16 + value for value in noise])
    assert (gains.low, gains.high, gains.p) == (0.0625, 0.0625, 0.25)
    assert t_interval([0.0625, 0.0625 + 1e-9]).low < 0.0625, "a difference above the rounding is a spread"


@pytest.mark.parametrize(("p_values", "adjusted"), [
    ([0.01, 0.04, 0.03], [0.03, 0.06, 0.06]),
    ([0.043, 0.2, 0.5], [0.129, 0.4, 0.5]),  # issue 28: p = 0.043 among three comparisons is 0.13 after Holm
    ([0.5, 0.001], [0.5, 0.002]),
    ([0.04, 0.03], [0.06, 0.06]),  # monotone: 0.04 x 1 is raised to the smaller p's 0.03 x 2
    ([0.9, 0.8], [1.0, 1.0]),  # capped at 1
    ([math.nan, 0.02, 0.04], [math.nan, 0.04, 0.04]),  # an untested claim does not count
    ([], []),
])
def test_holm(p_values, adjusted):
    got = holm(p_values)
    assert [math.isnan(g) for g in got] == [math.isnan(a) for a in adjusted]
    assert [g for g in got if not math.isnan(g)] == pytest.approx([a for a in adjusted if not math.isnan(a)])


CURVES = {
    "trained": {0: {0: 0.20, 2: 0.50, 4: 0.60}, 1: {0: 0.30, 2: 0.55, 4: 0.70}, 2: {0: 0.25, 2: 0.40, 4: 0.62}},
    "lr0": {0: {0: 0.20, 2: 0.20, 4: 0.21}, 1: {0: 0.30, 2: 0.31, 4: 0.30}, 2: {0: 0.25, 2: 0.25, 4: 0.24}},
    "trained-rerun": {0: {0: 0.20, 4: 0.55}, 1: {0: 0.30, 4: 0.72}, 2: {0: 0.25, 4: 0.60}},
}


def test_the_claims_are_each_arms_change_and_its_difference_from_the_control_holm_corrected():
    made = claims(CURVES, "lr0", exclude=["trained-rerun"])
    assert [c.name for c in made] == ["trained: step 4 - step 0", "trained - lr0 at step 4", "lr0: step 4 - step 0"]
    change, versus, control = made
    assert change.differences == pytest.approx({0: 0.40, 1: 0.40, 2: 0.37})
    assert versus.differences == pytest.approx({0: 0.39, 1: 0.40, 2: 0.38})
    assert control.differences == pytest.approx({0: 0.01, 1: 0.0, 2: -0.01})
    assert change.interval.mean == pytest.approx(0.39) and change.interval.low > 0
    raw = [c.interval.p for c in made]
    assert [c.p_holm for c in made] == pytest.approx(holm(raw))
    assert control.p_holm == pytest.approx(1.0)


def test_claims_compare_at_the_last_step_every_arm_validated():
    assert final_step(CURVES) == 4
    assert final_step({"a": {0: {0: 0.1, 2: 0.2, 6: 0.3}}, "b": {0: {0: 0.1, 2: 0.2}}}) == 2
    with pytest.raises(ValueError, match="share no validated step"):
        final_step({"a": {0: {1: 0.1}}, "b": {0: {2: 0.2}}})
    without_control = claims(CURVES, None, exclude=["trained-rerun", "lr0"])
    assert [c.name for c in without_control] == ["trained: step 4 - step 0"]


def test_pairs_are_by_seed_and_a_curve_is_banded_per_step():
    assert paired({0: 1.0, 1: 2.0, 5: 3.0}, {1: 0.5, 5: 1.0, 7: 9.0}) == {1: 1.5, 5: 2.0}
    assert at_step(CURVES["trained-rerun"], 2) == {}
    points = band(CURVES["lr0"])
    assert list(points) == [0, 2, 4] and points[0].mean == pytest.approx(0.25) and points[0].n == 3


def test_the_rerun_spread():
    spread = rerun_spread(CURVES, "trained", "trained-rerun")
    assert spread.final_difference.differences == pytest.approx({0: 0.05, 1: -0.02, 2: 0.02})
    assert spread.max_abs_final == pytest.approx(0.05)
    assert spread.change_difference.differences == pytest.approx({0: 0.05, 1: -0.02, 2: 0.02})
    assert spread.final_difference.interval.low < 0 < spread.final_difference.interval.high
