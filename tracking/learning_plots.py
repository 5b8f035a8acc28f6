"""The learning report's pictures as PNG files (matplotlib, Agg backend: no display needed).

- `plot_curves`: validation reward per step for each arm, the mean over seeds with its 95% band and each seed's
  run as a thin line; the control arm (lr = 0) dashed in grey, every arm's step-0 mean as a dotted level.
- `plot_claims`: the paired differences (claims, and the rerun spread when there is one) as points with their 95%
  intervals, a line at 0, each labelled with its Holm-adjusted p.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: files only, whatever the environment's backend
import matplotlib.pyplot as plt  # noqa: E402

from tracking.learning_stats import Claim, Curve, band, steps_of  # noqa: E402

CONTROL_COLOR = "0.45"
DPI = 120


def plot_curves(curves: Mapping[str, Curve], control: str | None, path: Path, title: str,
                metric: str = "validation reward") -> Path:
    """Writes the curves figure to `path` (PNG) and returns it."""
    figure, axes = plt.subplots(figsize=(7.5, 4.5))
    palette = iter(plt.rcParams["axes.prop_cycle"].by_key()["color"])
    for arm in sorted(curves, key=lambda name: (name == control, name)):
        is_control = arm == control
        color = CONTROL_COLOR if is_control else next(palette)
        points = band(curves[arm])
        steps = list(points)
        means = [points[s].mean for s in steps]
        for seed_steps in curves[arm].values():
            seed_points = sorted(seed_steps.items())
            axes.plot([s for s, _ in seed_points], [v for _, v in seed_points], color=color, alpha=0.25,
                      linewidth=0.8, linestyle="--" if is_control else "-")
        lows = [points[s].low if not math.isnan(points[s].low) else points[s].mean for s in steps]
        highs = [points[s].high if not math.isnan(points[s].high) else points[s].mean for s in steps]
        axes.fill_between(steps, lows, highs, color=color, alpha=0.18, linewidth=0)
        seeds = len(curves[arm])
        axes.plot(steps, means, color=color, marker="o", linewidth=2, linestyle="--" if is_control else "-",
                  label=f"{arm}{' (control)' if is_control else ''}: mean of {seeds} seed{'s' * (seeds != 1)}")
        if 0 in points:
            axes.axhline(points[0].mean, color=color, linestyle=":", linewidth=1)
    axes.set_xlabel("training step (0: before any update)")
    axes.set_ylabel(metric)
    axes.set_xticks(sorted({s for curve in curves.values() for s in steps_of(curve)}))
    axes.set_title(title, fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="best")
    figure.text(0.01, 0.01, "band: 95% t-interval over seeds; thin lines: each seed; dotted: step-0 mean",
                fontsize=7, color="0.35")
    return save(figure, path)


def plot_claims(claims: Sequence[Claim], path: Path, title: str, reruns: Sequence[Claim] = ()) -> Path:
    """Writes the paired-differences figure to `path` (PNG) and returns it: claims in blue, reruns in grey."""
    rows = [(c, False) for c in claims] + [(c, True) for c in reruns]
    figure, axes = plt.subplots(figsize=(7.5, 1.2 + 0.55 * max(len(rows), 1)))
    for y, (item, is_rerun) in enumerate(reversed(rows)):
        interval = item.interval
        color = CONTROL_COLOR if is_rerun else "tab:blue"
        if not math.isnan(interval.low):
            axes.plot([interval.low, interval.high], [y, y], color=color, linewidth=2.5)
        axes.plot([interval.mean], [y], marker="o", color=color)
        p_text = "" if math.isnan(item.p_holm) else f", Holm p={item.p_holm:.3f}"
        axes.annotate(f"{interval.mean:+.3f} (n={interval.n}{p_text})", (interval.mean, y), xytext=(0, 7),
                      textcoords="offset points", ha="center", fontsize=7)
    axes.axvline(0.0, color="black", linewidth=0.8)
    axes.set_yticks(range(len(rows)))
    axes.set_yticklabels([("rerun: " if is_rerun else "") + item.name for item, is_rerun in reversed(rows)],
                         fontsize=8)
    axes.set_xlabel("paired difference (per seed), 95% t-interval")
    axes.set_title(title, fontsize=10)
    axes.grid(axis="x", alpha=0.3)
    axes.set_ylim(-0.7, len(rows) - 0.3)
    return save(figure, path)


def save(figure, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, format="png", dpi=DPI)
    plt.close(figure)
    return path
