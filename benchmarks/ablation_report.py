"""The ablation's report: each arm's final validation reward with a 95% t-interval over seeds, the paired
differences between arms (per seed: the same training tasks and the same validation set) with Holm-adjusted p-values,
next to the Agent Lightning v1.0 report's 38.2 / 35.0 / 33.1, and how unevenly each arm's rollouts split within a
group. Whether any arm learned (each arm against its step 0 and the lr = 0 control) is `learning_report.py`'s, on the
same page (FULL_RUN).

    .venv/bin/python benchmarks/ablation_report.py --ablation NAME [--experiment ablation] [--tracking-uri URI]

Reads the runs of the MLflow experiment tagged `ablation=NAME` (flow `ablation`, flows/ablation.py): per run its
`arm` and `seed` tags, the last value of `val/reward_mean` (the validation after the last iteration) and its wall time
(MLflow's start and end time: processes, training, validation, uploads); prints the report and writes it into
benchmarks/ablation.md (or --out) between the page's report markers (the rest of the page stays; a page without
them gets the report appended).
"""

from __future__ import annotations

import argparse
import itertools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from flows.ablation_plan import REPORT_ARMS
from tracking.learning_stats import Interval, holm, paired, t_interval

FINAL_METRIC = "val/reward_mean"
DEFAULT_OUT = Path(__file__).resolve().parent / "ablation.md"
START, END = "<!-- ablation-report:start -->", "<!-- ablation-report:end -->"
"""The markers of the generated part of the page."""
FULL_RUN = (".venv/bin/python -m flows.ablation --name ablation-full   # 4 arms x 5 seeds, profile ablation-local\n"
            ".venv/bin/python benchmarks/ablation_report.py --ablation ablation-full\n"
            ".venv/bin/python benchmarks/learning_report.py --ablation ablation-full --experiment ablation "
            "--control lr0 --out benchmarks/ablation.md")
"""The commands of the full ablation and its report."""
REFERENCE = {arm.name: arm.reference for arm in REPORT_ARMS}
"""The report's step-128 SWE numbers (%) by arm name."""


def paired_differences(first: Mapping[int, float], second: Mapping[int, float]) -> list[float]:
    """first - second for every seed both have, in seed order (`learning_stats.paired`'s values)."""
    return list(paired(first, second).values())


def arm_order(arms: Sequence[str]) -> list[str]:
    """The report's arms first (in its order), then the others by name."""
    known = [name for name in REFERENCE if name in arms]
    return known + sorted(set(arms) - set(known))


def fmt(value: float, digits: int = 3) -> str:
    return "" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def interval_text(interval: Interval) -> str:
    if math.isnan(interval.low):
        return "(one seed: no interval)"
    return f"[{fmt(interval.low)}, {fmt(interval.high)}]"


def render(ablation: str, experiment: str, finals: Mapping[str, Mapping[int, float]],
           wall_s: Mapping[str, Mapping[int, float]] | None = None, flow_s: Sequence[float] = (),
           spread: Mapping[str, Mapping[int, tuple[float, float]]] | None = None) -> str:
    """The markdown report from {arm: {seed: final validation reward}} (and {arm: {seed: run wall time in s}}, the
    wall time of each invocation of the flow in s, and {arm: {seed: (within-group variance of samples per rollout,
    share of groups split unevenly)}})."""
    arms = arm_order(list(finals))
    seeds = sorted({seed for per_seed in finals.values() for seed in per_seed})
    lines = [f"# Ablation `{ablation}`: final validation reward by arm", "",
             f"MLflow experiment `{experiment}`, runs tagged `ablation={ablation}`; metric `{FINAL_METRIC}` after the "
             f"last iteration (the same validation set for every run); {len(seeds)} seed(s): {seeds}. "
             "95% intervals are Student-t over seeds; the paired differences are per seed (same training tasks, "
             "same validation set). The report's numbers are SWE accuracy at step 128 (%), another task and "
             "scale: compare the ordering, not the values.", "",
             "| arm | seeds | mean | 95% CI | report (%) |", "|---|---|---|---|---|"]
    for arm in arms:
        interval = t_interval(list(finals[arm].values()))
        reference = REFERENCE.get(arm)
        lines.append(f"| {arm} | {interval.n} | {fmt(interval.mean)} | {interval_text(interval)} | "
                     f"{'' if reference is None else reference} |")
    lines += ["", "Paired differences (row arm minus column arm, per seed; p of the paired t-test, Holm-adjusted "
              "over every difference in the table):", "",
              "| difference | seeds | mean | 95% CI | p (Holm) | report (points) |", "|---|---|---|---|---|---|"]
    for (first, second), interval, p_holm in arm_differences(arms, finals):
        ref_a, ref_b = REFERENCE.get(first), REFERENCE.get(second)
        reference = "" if ref_a is None or ref_b is None else f"{ref_a - ref_b:+.1f}"
        lines.append(f"| {first} - {second} | {interval.n} | {fmt(interval.mean)} | {interval_text(interval)} | "
                     f"{fmt(p_holm)} | {reference} |")
    lines += ["", "Reproduce (the full ablation; MLflow on the profile's SQLite store):", "", "```bash", FULL_RUN,
              "```"]
    lines += ["", "Per seed:", "", "| seed | " + " | ".join(arms) + " |", "|---" * (len(arms) + 1) + "|"]
    for seed in seeds:
        lines.append(f"| {seed} | " + " | ".join(fmt(finals[arm].get(seed, math.nan)) for arm in arms) + " |")
    if spread:
        lines += split_spread_lines(arms, spread)
    if wall_s:
        lines += wall_time_lines(arms, seeds, wall_s)
    if flow_s:
        lines += ["", flow_time_line(flow_s)]
    return "\n".join(lines) + "\n"


def arm_differences(arms: Sequence[str], finals: Mapping[str, Mapping[int, float]]
                    ) -> list[tuple[tuple[str, str], Interval, float]]:
    """Every pair of arms with a seed in common: (first, second), the interval of first - second over the seeds, and
    its p Holm-adjusted over all the pairs (nan with one seed)."""
    pairs = [(pair, paired_differences(finals[pair[0]], finals[pair[1]])) for pair in itertools.combinations(arms, 2)]
    intervals = [(pair, t_interval(diffs)) for pair, diffs in pairs if diffs]
    adjusted = holm([interval.p for _, interval in intervals])
    return [(pair, interval, p) for (pair, interval), p in zip(intervals, adjusted, strict=True)]


def split_spread_lines(arms: Sequence[str], spread: Mapping[str, Mapping[int, tuple[float, float]]]) -> list[str]:
    """The table of how unevenly each arm's rollouts split within a group: per run, the mean over its training steps
    of `samples/per_rollout_var_within_group` and `samples/groups_with_varied_splits_share`; per arm, the mean over
    its runs."""
    lines = ["", "Samples per rollout within a group (training steps; the arms differ only where rollouts of a group "
             "split into different numbers of samples):", "",
             "| arm | runs | within-group variance of samples per rollout | share of groups split unevenly |",
             "|---|---|---|---|"]
    for arm in arms:
        runs = list(spread.get(arm, {}).values())
        if runs:
            variance = math.fsum(v for v, _ in runs) / len(runs)
            share = math.fsum(s for _, s in runs) / len(runs)
            lines.append(f"| {arm} | {len(runs)} | {fmt(variance)} | {fmt(share, 2)} |")
    return lines


def flow_time_line(flow_s: Sequence[float]) -> str:
    """The flow's own wall time (its umbrella runs: the runs' start-up and the gaps between runs included)."""
    if len(flow_s) == 1:
        return f"The flow, start to end (its umbrella run, the gaps between runs included): {flow_s[0] / 60:.1f} min."
    each = ", ".join(f"{value / 60:.1f}" for value in flow_s)
    return (f"The flow ran in {len(flow_s)} invocations (umbrella runs, the gaps between runs included): {each} min, "
            f"{sum(flow_s) / 60:.1f} min in all.")


def wall_time_lines(arms: Sequence[str], seeds: Sequence[int], wall_s: Mapping[str, Mapping[int, float]]) -> list[str]:
    """The wall time of every run (s) and of all of them together (min)."""
    total_s = sum(value for per_seed in wall_s.values() for value in per_seed.values())
    count = sum(len(per_seed) for per_seed in wall_s.values())
    lines = ["", f"Wall time per run (s; {count} runs, {total_s / 60:.1f} min in all, run after run):", "",
             "| seed | " + " | ".join(arms) + " |", "|---" * (len(arms) + 1) + "|"]
    for seed in seeds:
        lines.append(f"| {seed} | " + " | ".join(fmt(wall_s.get(arm, {}).get(seed, math.nan), 0) for arm in arms)
                     + " |")
    return lines


def with_report(page: str | None, report: str, start: str = START, end: str = END) -> str:
    """`page` with the part between its report markers (`start`, `end`) replaced by `report`; a page without them
    gets the marked report appended (never lost); no page: the marked report alone."""
    marked = f"{start}\n{report}{end}\n"
    if not page:
        return marked
    if start not in page or end not in page:
        return page.rstrip("\n") + "\n\n" + marked
    before, rest = page.split(start, 1)
    after = rest.split(end, 1)[1].lstrip("\n")
    return before + marked + ("\n" + after if after else "")


def ablation_runs(tracking_uri: str, experiment: str, ablation: str,
                  role: str = "arm-run") -> tuple[Any, list[Any]]:
    """An MLflow client and the runs of the ablation `ablation` in `experiment` with tag `ablation_role=role` (the
    arm runs; "umbrella": the flow's own runs, one per invocation)."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise SystemExit(f"no MLflow experiment {experiment!r} at {tracking_uri}; pass --experiment/--tracking-uri")
    runs = client.search_runs([found.experiment_id],
                              f"tags.ablation = '{ablation}' and tags.ablation_role = '{role}'", max_results=1000)
    return client, list(runs)


def read_finals(tracking_uri: str, experiment: str,
                ablation: str) -> tuple[dict[str, dict[int, float]], dict[str, dict[int, float]]]:
    """{arm: {seed: last val/reward_mean}} and {arm: {seed: wall time in s}} of the ablation's finished runs (runs
    without the metric are left out, named)."""
    client, runs = ablation_runs(tracking_uri, experiment, ablation)
    finals: dict[str, dict[int, float]] = {}
    wall_s: dict[str, dict[int, float]] = {}
    for run in runs:
        history = client.get_metric_history(run.info.run_id, FINAL_METRIC)
        if not history:
            print(f"run {run.info.run_name} ({run.info.status}) has no {FINAL_METRIC}: left out")
            continue
        last = max(history, key=lambda point: (point.step, point.timestamp))
        arm, seed = run.data.tags["arm"], int(run.data.tags["seed"])
        finals.setdefault(arm, {})[seed] = last.value
        if run.info.end_time:
            wall_s.setdefault(arm, {})[seed] = (run.info.end_time - run.info.start_time) / 1000.0
    if not finals:
        raise SystemExit(f"no finished run of ablation {ablation!r} in experiment {experiment!r}")
    return finals, wall_s


SPREAD_METRICS = ("samples/per_rollout_var_within_group", "samples/groups_with_varied_splits_share")
"""What a training step logs of how unevenly its groups split (trainer/split_spread.py)."""


def read_split_spread(tracking_uri: str, experiment: str,
                      ablation: str) -> dict[str, dict[int, tuple[float, float]]]:
    """{arm: {seed: (mean over training steps of each SPREAD_METRICS)}} of the ablation's runs that logged them."""
    client, runs = ablation_runs(tracking_uri, experiment, ablation)
    spread: dict[str, dict[int, tuple[float, float]]] = {}
    for run in runs:
        means = []
        for key in SPREAD_METRICS:
            values = [point.value for point in client.get_metric_history(run.info.run_id, key)]
            means.append(math.fsum(values) / len(values) if values else math.nan)
        if not any(math.isnan(m) for m in means):
            spread.setdefault(run.data.tags["arm"], {})[int(run.data.tags["seed"])] = (means[0], means[1])
    return spread


def flow_wall_s(tracking_uri: str, experiment: str, ablation: str) -> list[float]:
    """Start-to-end wall time (s) of each finished invocation of the ablation's flow (its umbrella runs), oldest
    first."""
    _, runs = ablation_runs(tracking_uri, experiment, ablation, role="umbrella")
    finished = sorted((run for run in runs if run.info.end_time), key=lambda run: run.info.start_time)
    return [(run.info.end_time - run.info.start_time) / 1000.0 for run in finished]


def main(argv: Sequence[str] | None = None) -> None:
    from flows.config import DEFAULT_TRACKING_URI, load_run_config

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ablation", required=True, help="the ablation's name (the flow's `name`)")
    parser.add_argument("--experiment", default="ablation")
    parser.add_argument("--tracking-uri", default=None, help=f"default: the profile's ({DEFAULT_TRACKING_URI})")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    uri = args.tracking_uri or load_run_config("ablation-local").tracking_uri()
    finals, wall_s = read_finals(uri, args.experiment, args.ablation)
    report = render(args.ablation, args.experiment, finals, wall_s, flow_wall_s(uri, args.experiment, args.ablation),
                    read_split_spread(uri, args.experiment, args.ablation))
    args.out.write_text(with_report(args.out.read_text() if args.out.is_file() else None, report))
    print(report)


if __name__ == "__main__":
    main()
