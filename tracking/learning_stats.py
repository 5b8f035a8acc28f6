"""The statistics of a learning claim with controls (pure): per-step validation curves over seeds, paired
differences with Student-t intervals, Holm's correction over the claims a report makes, and the rerun spread.

An experiment is arms x seeds of training runs (flow `ablation`), each with its validation reward per step (step 0:
before any update). Its claims, per trained arm, both paired by seed (the same training tasks and validation set):
- `final - step 0`: the arm's last validated step minus its own step 0;
- `final - control`: the arm minus the control arm (lr = 0) at that step.
Each claim's p-value is the two-sided one-sample t-test of its paired differences against 0; `holm` adjusts them
for the number of claims made together. A rerun pair (two arms of one configuration) gives the spread a difference
shows by chance: the same two statistics per seed, next to the claims'.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scipy import stats

Curve = Mapping[int, Mapping[int, float]]
"""seed -> step -> validation reward of one arm."""

DECIMALS = 12
"""Values are rounded to this many decimals before any statistic: a validation reward is a mean of task rewards, and
summing the same rewards in another order differs by about 1e-17, which must read as no difference (an lr = 0
control's step-4 minus step-0 is exactly 0, not a spread whose t-test gives p 0.18; one task of 64 is 0.016)."""


@dataclass(frozen=True)
class Interval:
    """A mean with its two-sided Student-t confidence interval and the t-test's p-value against 0 (low, high and p
    are nan with fewer than two values; when every value is the same the interval is that value and p the sign
    test's, `t_interval`)."""

    n: int
    mean: float
    low: float
    high: float
    p: float


def t_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """mean +- t_{(1+c)/2, n-1} s / sqrt(n) (s the sample standard deviation) and the one-sample t-test's p. Values
    with no spread (n equal differences, common with a few seeds and rewards in steps of 1/16) leave the t-test
    undefined, not certain: p is then the exact two-sided sign test's, 2 x 0.5^n for n values of one sign (1 when
    they are 0), so three seeds that each gained one task give p 0.25, not 0. Values are first rounded to
    `DECIMALS` (floating-point summation noise is no spread)."""
    if not values:
        raise ValueError("t_interval needs at least one value")
    values = [round(value, DECIMALS) for value in values]
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return Interval(n, mean, math.nan, math.nan, math.nan)
    if min(values) == max(values):  # no spread (the mean's rounding must not pass for one)
        value = values[0]
        return Interval(n, value, value, value, 1.0 if value == 0.0 else min(1.0, 2.0 * 0.5 ** n))
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    se = sd / math.sqrt(n)
    half = float(stats.t.ppf((1 + confidence) / 2, n - 1)) * se
    p = 2.0 * float(stats.t.sf(abs(mean / se), n - 1))
    return Interval(n, mean, mean - half, mean + half, p)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input's order: the k-th smallest of m is multiplied by m - k + 1,
    made non-decreasing along that order and capped at 1. nan (no test) stays nan and does not count in m."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        adjusted[i] = running
    return adjusted


def paired(first: Mapping[int, float], second: Mapping[int, float]) -> dict[int, float]:
    """first - second for every seed both have, by seed."""
    return {seed: first[seed] - second[seed] for seed in sorted(set(first) & set(second))}


def at_step(curve: Curve, step: int) -> dict[int, float]:
    """seed -> value at `step` (the seeds that have one)."""
    return {seed: steps[step] for seed, steps in sorted(curve.items()) if step in steps}


def steps_of(curve: Curve) -> list[int]:
    """Every step some seed validated, in order."""
    return sorted({step for steps in curve.values() for step in steps})


def band(curve: Curve, confidence: float = 0.95) -> dict[int, Interval]:
    """step -> the t-interval over seeds of the validation reward (the curve and its band)."""
    return {step: t_interval(list(at_step(curve, step).values()), confidence) for step in steps_of(curve)}


@dataclass(frozen=True)
class Claim:
    """One paired comparison: its name, the per-seed differences, their interval and the Holm-adjusted p."""

    name: str
    differences: Mapping[int, float]
    interval: Interval
    p_holm: float = math.nan


def final_step(curves: Mapping[str, Curve]) -> int:
    """The last step every arm validated (the comparison point); ValueError when the arms share none."""
    common = set.intersection(*(set(steps_of(curve)) for curve in curves.values())) if curves else set()
    if not common:
        raise ValueError(f"the arms {sorted(curves)} share no validated step; did every run validate?")
    return max(common)


def claims(curves: Mapping[str, Curve], control: str | None, step: int | None = None,
           exclude: Sequence[str] = (), confidence: float = 0.95) -> list[Claim]:
    """Per arm other than `control` and `exclude` (reruns): `final - step 0` and, with a control, `final - control`,
    at `step` (default: the last step every arm validated); then Holm over all of them. The control's own
    `final - step 0` is a claim too (a control that moves shows the sampler or the data, not learning)."""
    step = final_step(curves) if step is None else step
    made: list[Claim] = []
    for arm in sorted(curves, key=lambda name: (name == control, name)):
        if arm in exclude:
            continue
        final = at_step(curves[arm], step)
        start = at_step(curves[arm], 0)
        if start and step != 0:
            made.append(claim(f"{arm}: step {step} - step 0", paired(final, start), confidence))
        if control is not None and arm != control and control in curves:
            made.append(claim(f"{arm} - {control} at step {step}", paired(final, at_step(curves[control], step)),
                              confidence))
    adjusted = holm([c.interval.p for c in made])
    return [Claim(c.name, c.differences, c.interval, p) for c, p in zip(made, adjusted, strict=True)]


def claim(name: str, differences: Mapping[int, float], confidence: float = 0.95) -> Claim:
    """A claim from its per-seed differences (ValueError naming it when no seed pairs)."""
    if not differences:
        raise ValueError(f"claim {name!r}: no seed has both values; the runs of a pair must share seeds")
    return Claim(name, dict(differences), t_interval(list(differences.values()), confidence))


@dataclass(frozen=True)
class RerunSpread:
    """Two arms of one configuration: how far apart chance puts them, per seed, at the final step and in the
    change from step 0."""

    first: str
    second: str
    final_difference: Claim
    """first - second at the final step, paired by seed: its interval should hold 0."""
    change_difference: Claim | None
    """(final - step 0 of first) - (final - step 0 of second): the spread of the `final - step 0` claim."""
    max_abs_final: float
    """The largest |first - second| at the final step over the seeds."""


def rerun_spread(curves: Mapping[str, Curve], first: str, second: str, step: int | None = None,
                 confidence: float = 0.95) -> RerunSpread:
    """The spread between two runs of one configuration (see `RerunSpread`)."""
    step = final_step(curves) if step is None else step
    a, b = curves[first], curves[second]
    finals = paired(at_step(a, step), at_step(b, step))
    changes = paired(paired(at_step(a, step), at_step(a, 0)), paired(at_step(b, step), at_step(b, 0)))
    change = claim(f"({first} - {second}): change from step 0", changes, confidence) if changes else None
    return RerunSpread(first, second, claim(f"{first} - {second} at step {step}", finals, confidence), change,
                       max((abs(v) for v in finals.values()), default=math.nan))
