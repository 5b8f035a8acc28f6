"""Learning curves of an ablation's arms (an lr sweep with an lr = 0 control): the validation reward at every
validated step with a 95% t-interval over seeds, its change from the step-0 baseline and its difference from the
control arm (both paired by seed), and the approx KL of every step.

    .venv/bin/python benchmarks/curve_report.py --ablation NAME --experiment learning-if --control lr0 \
        [--tracking-uri URI] [--out benchmarks/learning_if.md] [--save-data benchmarks/data/NAME.json]
    .venv/bin/python benchmarks/curve_report.py --ablation NAME --load-data benchmarks/data/NAME.json ...

Reads the arm runs of the ablation (flow `ablation`, tags `ablation`, `arm`, `seed`): per run the history of
`val/reward_mean` (step 0 is the validation before any update; the flow logs it when `algorithm.val_every` > 0),
`rollout/reward_mean` and `loss/approx_kl_k3`; prints the report and writes it into --out between the page's
curve-report markers (the rest of the page stays). --save-data keeps the curves the report was made from (every
seed's value at every step) as JSON beside the page; --load-data renders from such a file instead of MLflow.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the project's packages

from benchmarks.ablation_report import (  # noqa: E402
    ablation_runs,
    fmt,
    interval_text,
    paired_differences,
    t_interval,
    with_report,
)

VAL, BATCH, KL = "val/reward_mean", "rollout/reward_mean", "loss/approx_kl_k3"
METRICS = (VAL, BATCH, KL)
DEFAULT_OUT = Path(__file__).resolve().parent / "learning_if.md"
START, END = "<!-- curve-report:start -->", "<!-- curve-report:end -->"
"""The markers of the generated part of the page."""

Curves = Mapping[str, Mapping[int, Mapping[str, Mapping[int, float]]]]
"""arm -> seed -> metric -> step -> value."""


def by_step(curves: Curves, arm: str, metric: str) -> dict[int, dict[int, float]]:
    """step -> {seed: value} of one arm's metric."""
    steps: dict[int, dict[int, float]] = {}
    for seed, metrics in curves[arm].items():
        for step, value in metrics.get(metric, {}).items():
            steps.setdefault(step, {})[seed] = value
    return dict(sorted(steps.items()))


def final_step(curves: Curves) -> int | None:
    """The last validated step of the whole ablation (None when nothing was validated)."""
    steps = [step for arm in curves for step in by_step(curves, arm, VAL)]
    return max(steps) if steps else None


def difference_cell(first: Mapping[int, float], second: Mapping[int, float]) -> str:
    """`mean [95% CI] (n)` of first - second per seed; empty without a common seed."""
    diffs = paired_differences(first, second)
    if not diffs:
        return ""
    interval = t_interval(diffs)
    return f"{fmt(interval.mean)} {interval_text(interval)} (n={interval.n})"


def summary_lines(curves: Curves, arms: Sequence[str], control: str | None) -> list[str]:
    """One row per arm: step-0 and final validation reward, the paired change and the paired difference from the
    control at the final step."""
    last = final_step(curves)
    lines = [f"| arm | seeds | val reward, step 0 | val reward, step {last} | step {last} - step 0 | "
             f"step {last} - {control or 'control'} |", "|---|---|---|---|---|---|"]
    control_final = by_step(curves, control, VAL).get(last, {}) if control in curves else {}
    for arm in arms:
        val = by_step(curves, arm, VAL)
        start, final = val.get(0, {}), val.get(last, {})
        cells = [interval_cell(start), interval_cell(final), difference_cell(final, start),
                 "" if arm == control else difference_cell(final, control_final)]
        lines.append(f"| {arm} | {len(curves[arm])} | " + " | ".join(cells) + " |")
    return lines


def interval_cell(per_seed: Mapping[int, float]) -> str:
    if not per_seed:
        return ""
    interval = t_interval(list(per_seed.values()))
    return f"{fmt(interval.mean)} {interval_text(interval)}"


def arm_lines(curves: Curves, arm: str) -> list[str]:
    """One row per step of one arm: validation reward (mean, CI, seeds), batch reward, approx KL (mean, max)."""
    val, batch, kl = (by_step(curves, arm, metric) for metric in METRICS)
    lines = [f"### {arm}", "", "| step | val seeds | val reward | 95% CI | batch reward | approx KL, mean | "
             "approx KL, max |", "|---|---|---|---|---|---|---|"]
    for step in sorted(set(val) | set(batch) | set(kl)):
        point = t_interval(list(val[step].values())) if step in val else None
        kls = list(kl.get(step, {}).values())
        cells = ["" if point is None else str(point.n), "" if point is None else fmt(point.mean),
                 "" if point is None else interval_text(point), mean_cell(batch.get(step, {})),
                 mean_cell(kl.get(step, {}), 4), fmt(max(kls), 4) if kls else ""]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return lines


def mean_cell(per_seed: Mapping[int, float], digits: int = 3) -> str:
    values = [v for v in per_seed.values() if not math.isnan(v)]
    return fmt(sum(values) / len(values), digits) if values else ""


def render(ablation: str, experiment: str, curves: Curves, control: str | None, val_tasks: int | None = None) -> str:
    """The markdown report of {arm: {seed: {metric: {step: value}}}}."""
    arms = sorted(curves, key=lambda arm: (arm != control, arm))
    seeds = sorted({seed for per_seed in curves.values() for seed in per_seed})
    size = f"{val_tasks} validation rollouts per point" if val_tasks else "the same validation set at every point"
    lines = [f"# Learning curves `{ablation}`", "",
             f"MLflow experiment `{experiment}`, runs tagged `ablation={ablation}`; seeds {seeds}, {size}, one "
             f"validation set for every run. Validation reward `{VAL}` (step 0: before any update); 95% intervals "
             "are Student-t over seeds, differences paired by seed (same training tasks, same validation set). "
             f"Batch reward `{BATCH}` is the mean over the step's training rollouts (new tasks each step); approx "
             f"KL `{KL}` is the k3 estimate between the policy being updated and the one that sampled the batch, "
             "averaged over the step's updates.", "", "## Summary", ""]
    lines += summary_lines(curves, arms, control)
    lines += ["", "## Per step", ""]
    for arm in arms:
        lines += arm_lines(curves, arm) + [""]
    return "\n".join(lines)


def read_curves(tracking_uri: str, experiment: str, ablation: str) -> Curves:
    """{arm: {seed: {metric: {step: value}}}} of the ablation's runs (the last value logged at each step)."""
    client, runs = ablation_runs(tracking_uri, experiment, ablation)
    curves: dict[str, dict[int, dict[str, dict[int, float]]]] = {}
    for run in runs:
        arm, seed = run.data.tags["arm"], int(run.data.tags["seed"])
        per_metric = curves.setdefault(arm, {}).setdefault(seed, {})
        for metric in METRICS:
            for point in sorted(client.get_metric_history(run.info.run_id, metric), key=lambda p: p.timestamp):
                per_metric.setdefault(metric, {})[point.step] = point.value
    if not curves:
        raise SystemExit(f"no run of ablation {ablation!r} in experiment {experiment!r}")
    return curves


def curves_to_json(curves: Curves) -> str:
    """The curves as JSON (keys become strings: arm -> seed -> metric -> step -> value)."""
    return json.dumps(curves, indent=1, sort_keys=True) + "\n"


def curves_from_json(text: str) -> Curves:
    """Curves written by curves_to_json, with integer seeds and steps again."""
    return {arm: {int(seed): {metric: {int(step): float(value) for step, value in points.items()}
                              for metric, points in metrics.items()}
                  for seed, metrics in per_seed.items()}
            for arm, per_seed in json.loads(text).items()}


def merge_curves(parts: Sequence[tuple[str, Curves]]) -> Curves:
    """The curves of several (label, curves), e.g. two invocations of one experiment saved apart: each arm's seeds
    joined; a seed of an arm in two of them is a ValueError naming both (the same run cannot be counted twice)."""
    merged: dict[str, dict] = {}
    seen: dict[tuple[str, int], str] = {}
    for label, curves in parts:
        for arm, per_seed in curves.items():
            for seed, metrics in per_seed.items():
                if (arm, seed) in seen:
                    raise ValueError(f"arm {arm!r} seed {seed} is in both {seen[arm, seed]} and {label}: give each "
                                     "run once (save the invocations' data apart, with other seeds)")
                seen[arm, seed] = label
                merged.setdefault(arm, {})[seed] = metrics
    return merged


def main(argv: Sequence[str] | None = None) -> None:
    from flows.config import DEFAULT_TRACKING_URI, load_run_config

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ablation", required=True, help="the ablation's name (the flow's `name`)")
    parser.add_argument("--experiment", default="learning-if")
    parser.add_argument("--control", default="lr0", help="the arm the others are compared with (default lr0)")
    parser.add_argument("--val-tasks", type=int, default=None, help="validation rollouts per point (for the text)")
    parser.add_argument("--tracking-uri", default=None, help=f"default: the profile's ({DEFAULT_TRACKING_URI})")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--save-data", type=Path, default=None, help="also write the curves as JSON here")
    parser.add_argument("--load-data", type=Path, default=None, help="render from this JSON instead of MLflow")
    args = parser.parse_args(argv)
    if args.load_data is not None:
        curves = curves_from_json(args.load_data.read_text())
    else:
        uri = args.tracking_uri or load_run_config("if-local").tracking_uri()
        curves = read_curves(uri, args.experiment, args.ablation)
    if args.save_data is not None:
        args.save_data.parent.mkdir(parents=True, exist_ok=True)
        args.save_data.write_text(curves_to_json(curves))
    report = render(args.ablation, args.experiment, curves, args.control, args.val_tasks)
    args.out.write_text(with_report(args.out.read_text() if args.out.is_file() else None, report, START, END))
    print(report)


if __name__ == "__main__":
    main()
