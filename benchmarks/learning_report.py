"""The learning report of an experiment with controls: does the trained policy beat its own step 0 and an lr = 0
control, by more than a rerun of one configuration moves?

    .venv/bin/python benchmarks/learning_report.py --ablation NAME [--experiment harnessrl] [--control lr0] \
        [--rerun trained trained-rerun] [--tracking-uri URI] [--out benchmarks/learning_NAME.md] \
        [--images benchmarks/images] [--save-data benchmarks/data/NAME.json | --load-data FILE] [--no-log]

Reads the arm runs of the ablation (flow `ablation`, flows/ablation.py: tags `ablation`, `arm`, `seed`, under an
umbrella run) and each run's `val/reward_mean` per step (step 0: the validation before any update). Writes, per arm,
the validation reward per step (mean over seeds, 95% t-interval); the claims, paired by seed (each trained arm's
final step - its step 0, and trained - control at the final step) with 95% t-intervals and Holm-adjusted p-values;
the rerun spread when two arms are one configuration (`--rerun`, or arms with the same overrides in the umbrella's
arms.json); two PNG plots (tracking/learning_plots.py). The markdown goes into --out between the page's
learning-report markers (the rest of the page stays) with the PNGs beside it in --images; the PNGs and the markdown
are logged as artifacts of the ablation's umbrella run (its newest) under `learning-report/` unless --no-log.

The experiment itself, one command (any profile; here the calculator recipe, 3 seeds):

    .venv/bin/python -m flows.ablation --profile calculator-local --arms learning --seeds 0 1 2 --name calc-learning
    .venv/bin/python benchmarks/learning_report.py --ablation calc-learning --experiment harnessrl

(`--arms learning+rerun` adds `trained-rerun`, the trained configuration run again, for the rerun spread.)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the project's packages

from benchmarks.ablation_report import ablation_runs, with_report  # noqa: E402
from benchmarks.curve_report import VAL, curves_from_json, curves_to_json, merge_curves, read_curves  # noqa: E402
from tracking.learning_plots import plot_claims, plot_curves  # noqa: E402
from tracking.learning_stats import (  # noqa: E402
    Claim,
    Curve,
    Interval,
    RerunSpread,
    band,
    claims,
    final_step,
    rerun_spread,
)

START, END = "<!-- learning-report:start -->", "<!-- learning-report:end -->"
"""The markers of the generated part of the page."""
ARTIFACT_DIR = "learning-report"
"""Where the report lands in the umbrella run's artifacts."""
ALPHA = 0.05


@dataclass(frozen=True)
class Report:
    """Everything the page says, computed from the curves."""

    curves: Mapping[str, Curve]
    control: str | None
    step: int
    claims: list[Claim]
    reruns: list[RerunSpread]


def build_report(curves: Mapping[str, Curve], control: str | None,
                 rerun_pairs: Sequence[tuple[str, str]] = ()) -> Report:
    """The claims (the second arm of each rerun pair is left out of them) and the rerun spreads."""
    missing = [arm for pair in rerun_pairs for arm in pair if arm not in curves]
    if missing:
        raise SystemExit(f"rerun arms {missing} have no runs; the arms are {sorted(curves)}")
    if control is not None and control not in curves:
        print(f"control arm {control!r} has no runs (arms: {sorted(curves)}): no comparison with a control")
        control = None
    step = final_step(curves)
    made = claims(curves, control, step, exclude=[second for _, second in rerun_pairs])
    return Report(curves, control, step, made, [rerun_spread(curves, a, b, step) for a, b in rerun_pairs])


def rerun_pairs_from_arms(arms: Sequence[Mapping]) -> list[tuple[str, str]]:
    """Pairs of arms with the same overrides (the umbrella's arms.json): the first of them and each later one."""
    first_of: dict[str, str] = {}
    pairs = []
    for arm in arms:
        key = json.dumps(arm.get("overrides") or {}, sort_keys=True)
        if key in first_of:
            pairs.append((first_of[key], str(arm["name"])))
        else:
            first_of[key] = str(arm["name"])
    return pairs


def fmt(value: float, digits: int = 3) -> str:
    return "" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def interval_cell(interval: Interval) -> str:
    if math.isnan(interval.low):
        return f"{fmt(interval.mean)} (one seed)"
    if interval.low == interval.high:
        return f"{fmt(interval.mean)} (every seed alike)"
    return f"{fmt(interval.mean)} [{fmt(interval.low)}, {fmt(interval.high)}]"


def verdict(item: Claim) -> str:
    """Whether a claim holds: the interval excludes 0 and the Holm-adjusted p is below 0.05; every seed with the same
    non-zero difference has no interval, only the sign test's p (`t_interval`)."""
    if math.isnan(item.interval.low):
        return "one seed: untested"
    if item.interval.low == item.interval.high and item.interval.mean != 0:
        shown = not math.isnan(item.p_holm) and item.p_holm < ALPHA
        return ("holds (sign test: every seed alike)" if shown
                else "not shown (every seed alike: sign test only, too few seeds)")
    excludes = item.interval.low > 0 or item.interval.high < 0
    if excludes and not math.isnan(item.p_holm) and item.p_holm < ALPHA:
        return "holds" + (" (a decrease)" if item.interval.mean < 0 else "")
    return "interval excludes 0, not after Holm" if excludes else "not shown (interval holds 0)"


def render(name: str, experiment: str, report: Report, images: Mapping[str, str],
           sources: Sequence[str] = ()) -> str:
    """The markdown page of the report; `images` maps "curves" and "claims" to paths relative to the page; `sources`:
    the saved data files it was read from (none: MLflow's runs tagged with the ablation `name`)."""
    seeds = sorted({seed for curve in report.curves.values() for seed in curve})
    arms = sorted(report.curves, key=lambda arm: (arm == report.control, arm))
    read_from = (f"runs read from {', '.join(f'`{source}`' for source in sources)}" if sources
                 else f"runs tagged `ablation={name}`")
    lines = [f"# Learning report `{name}`", "",
             f"MLflow experiment `{experiment}`, {read_from}: arms {arms}, seeds {seeds}; control "
             f"`{report.control or 'none'}`. Metric `{VAL}` (step 0: before any update; the same seeded validation "
             f"set for every run). Claims are compared at step {report.step}, the last every arm validated; "
             "differences are paired by seed (same training tasks, same validation set), 95% Student-t intervals "
             "over seeds, p-values two-sided t-tests (exact sign tests where every seed gave the same difference) "
             f"Holm-corrected over the {len(report.claims)} claims.", "",
             f"![validation reward per step]({images['curves']})", "",
             f"![paired differences]({images['claims']})", "", "## Claims", "",
             "| claim | seeds | mean [95% CI] | p | Holm p | verdict |", "|---|---|---|---|---|---|"]
    for item in report.claims:
        lines.append(f"| {item.name} | {item.interval.n} | {interval_cell(item.interval)} | "
                     f"{fmt(item.interval.p)} | {fmt(item.p_holm)} | {verdict(item)} |")
    if report.reruns:
        lines += ["", "## Rerun spread (one configuration run twice)", "",
                  "| pair | seeds | final difference [95% CI] | largest per-seed gap | change-from-step-0 difference "
                  "[95% CI] |", "|---|---|---|---|---|"]
        for spread in report.reruns:
            change = spread.change_difference
            lines.append(f"| {spread.first} vs {spread.second} | {spread.final_difference.interval.n} | "
                         f"{interval_cell(spread.final_difference.interval)} | {fmt(spread.max_abs_final)} | "
                         f"{'' if change is None else interval_cell(change.interval)} |")
    lines += ["", "## Validation reward per step (mean over seeds [95% CI], seeds)", "",
              "| step | " + " | ".join(arms) + " |", "|---" * (len(arms) + 1) + "|"]
    bands = {arm: band(report.curves[arm]) for arm in arms}
    for step in sorted({s for b in bands.values() for s in b}):
        cells = [f"{interval_cell(bands[arm][step])} ({bands[arm][step].n})" if step in bands[arm] else ""
                 for arm in arms]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    lines += ["", "## Per seed: the claims' differences", "", "| claim | " + " | ".join(map(str, seeds)) + " |",
              "|---" * (len(seeds) + 1) + "|"]
    for item in report.claims:
        lines.append(f"| {item.name} | " + " | ".join(fmt(item.differences.get(s, math.nan)) for s in seeds) + " |")
    return "\n".join(lines) + "\n"


def write_images(name: str, report: Report, folder: Path) -> dict[str, Path]:
    """The two PNGs of the report under `folder`."""
    seeds = len({seed for curve in report.curves.values() for seed in curve})
    curves = plot_curves(report.curves, report.control, folder / f"{name}-curves.png",
                         f"{name}: validation reward per step ({seeds} seeds, 95% band)")
    spreads = [spread.final_difference for spread in report.reruns]
    claims_png = plot_claims(report.claims, folder / f"{name}-claims.png",
                             f"{name}: paired differences at step {report.step}", spreads)
    return {"curves": curves, "claims": claims_png}


def umbrella_run_id(tracking_uri: str, experiment: str, ablation: str) -> str | None:
    """The newest umbrella run of the ablation (the flow's own run), or None."""
    _, runs = ablation_runs(tracking_uri, experiment, ablation, role="umbrella")
    newest = max(runs, key=lambda run: run.info.start_time, default=None)
    return None if newest is None else newest.info.run_id


def read_arms(tracking_uri: str, run_id: str) -> list[dict]:
    """The umbrella run's arms.json (the arms and their overrides), or [] when it has none."""
    from mlflow import MlflowClient

    try:
        text = MlflowClient(tracking_uri=tracking_uri).download_artifacts(run_id, "arms.json")
    except Exception as error:  # noqa: BLE001 - an umbrella of an older flow: no rerun detection, said
        print(f"umbrella run {run_id} has no arms.json ({type(error).__name__}): reruns only from --rerun")
        return []
    return json.loads(Path(text).read_text())


def log_to_umbrella(tracking_uri: str, run_id: str, files: Sequence[Path]) -> None:
    """Every file as an artifact of the umbrella run under `learning-report/`."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    for path in files:
        client.log_artifact(run_id, str(path), ARTIFACT_DIR)


def val_curves(raw: Mapping[str, Mapping[int, Mapping[str, Mapping[int, float]]]]) -> dict[str, dict]:
    """arm -> seed -> step -> validation reward, from curve_report's arm -> seed -> metric -> step curves (runs
    without a validation left out)."""
    curves = {arm: {seed: dict(metrics.get(VAL, {})) for seed, metrics in per_seed.items() if metrics.get(VAL)}
              for arm, per_seed in raw.items()}
    return {arm: per_seed for arm, per_seed in curves.items() if per_seed}


def main(argv: Sequence[str] | None = None) -> None:
    from flows.config import DEFAULT_TRACKING_URI, PROJECT_ROOT, load_run_config

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ablation", required=True, help="the ablation's name (the flow's `name`)")
    parser.add_argument("--experiment", default="harnessrl", help="the MLflow experiment (the profile's "
                        "tracking.experiment)")
    parser.add_argument("--control", default="lr0", help="the control arm (default lr0); 'none' for no control")
    parser.add_argument("--rerun", nargs=2, action="append", default=[], metavar=("ARM", "RERUN_ARM"),
                        help="two arms of one configuration (repeatable); default: from the umbrella's arms.json")
    parser.add_argument("--tracking-uri", default=None, help=f"default: the profile's ({DEFAULT_TRACKING_URI})")
    parser.add_argument("--out", type=Path, default=None, help="default benchmarks/learning_NAME.md")
    parser.add_argument("--images", type=Path, default=Path(__file__).resolve().parent / "images")
    parser.add_argument("--save-data", type=Path, default=None, help="also write the curves as JSON here")
    parser.add_argument("--load-data", type=Path, nargs="+", default=None,
                        help="render from these JSON files instead of MLflow (several: their runs joined, each "
                             "arm's seed in one file only)")
    parser.add_argument("--log-to", default=None, metavar="ABLATION",
                        help="with --load-data: log the report to this ablation's umbrella run in --experiment")
    parser.add_argument("--no-log", action="store_true", help="do not log the report to the umbrella run")
    args = parser.parse_args(argv)
    uri = args.tracking_uri or load_run_config("calculator-local").tracking_uri()
    raw = (merge_curves([(str(path), curves_from_json(path.read_text())) for path in args.load_data])
           if args.load_data else read_curves(uri, args.experiment, args.ablation))
    if args.save_data is not None:
        args.save_data.parent.mkdir(parents=True, exist_ok=True)
        args.save_data.write_text(curves_to_json(raw))
    logged_to = args.log_to if args.load_data else args.ablation
    umbrella = None if logged_to is None else umbrella_run_id(uri, args.experiment, logged_to)
    if args.log_to is not None and umbrella is None:
        raise SystemExit(f"--log-to {args.log_to!r}: no umbrella run of that ablation in experiment "
                         f"{args.experiment!r}; name an ablation the flow ran there")
    pairs = [tuple(pair) for pair in args.rerun] or (rerun_pairs_from_arms(read_arms(uri, umbrella)) if umbrella
                                                      else [])
    report = build_report(val_curves(raw), None if args.control == "none" else args.control, pairs)
    out = args.out or Path(__file__).resolve().parent / f"learning_{args.ablation}.md"
    images = write_images(args.ablation, report, args.images)
    relative = {key: os.path.relpath(path, out.resolve().parent) for key, path in images.items()}
    sources = [os.path.relpath(path, PROJECT_ROOT) if path.resolve().is_relative_to(PROJECT_ROOT) else str(path)
               for path in args.load_data or ()]
    markdown = render(args.ablation, args.experiment, report, relative, sources)
    out.write_text(with_report(out.read_text() if out.is_file() else None, markdown, START, END))
    print(markdown)
    print(f"written: {out.relative_to(PROJECT_ROOT) if out.is_relative_to(PROJECT_ROOT) else out}, "
          + ", ".join(str(path) for path in images.values()))
    if umbrella is not None and not args.no_log:
        log_to_umbrella(uri, umbrella, [*images.values(), out])
        print(f"logged to the umbrella run {umbrella} under {ARTIFACT_DIR}/")


if __name__ == "__main__":
    main()
