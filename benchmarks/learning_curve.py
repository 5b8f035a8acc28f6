"""Reward against steps and wall-clock time of training runs logged to MLflow, as a markdown table.

    .venv/bin/python benchmarks/learning_curve.py --experiment learning-if --runs learn-if-s0 learn-if-s1

Reads each run's per-step metrics (rollout/reward_mean, rollout/pass_rate, val/reward_mean, train/policy_version)
and their timestamps; prints one table per run and a summary (first vs last steps).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from mlflow import MlflowClient

from flows.config import DEFAULT_TRACKING_URI, load_run_config
from tracking.mlflow_tracker import find_run_id

METRICS = ("rollout/reward_mean", "rollout/reward_std", "rollout/pass_rate", "val/reward_mean",
           "advantages/groups_with_signal", "loss/approx_kl_k3", "time/iteration_s")


def history(client: MlflowClient, run_id: str) -> dict[int, dict[str, float]]:
    """step → {metric: value, "t_s": seconds since the run's first logged step}."""
    rows: dict[int, dict[str, float]] = {}
    first_ms = None
    for key in METRICS:
        for point in client.get_metric_history(run_id, key):
            rows.setdefault(point.step, {})[key] = point.value
            if key == "rollout/reward_mean":
                first_ms = point.timestamp if first_ms is None else min(first_ms, point.timestamp)
                rows[point.step]["timestamp_ms"] = point.timestamp
    for row in rows.values():
        if "timestamp_ms" in row and first_ms is not None:
            row["t_s"] = (row.pop("timestamp_ms") - first_ms) / 1000.0
    return rows


def table(name: str, rows: dict[int, dict[str, float]]) -> str:
    header = ("| step | t (s) | reward mean | reward std | pass rate | val reward | groups with signal | approx KL "
              "| iteration (s) |")
    lines = [f"### {name}", "", header, "|---|---|---|---|---|---|---|---|---|"]
    for step in sorted(rows):
        r = rows[step]
        cells = [f"{r[k]:.3f}" if k in r else "" for k in METRICS]
        lines.append(f"| {step} | {r.get('t_s', 0):.0f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tracking-uri", default=None, help=f"default: the profile's ({DEFAULT_TRACKING_URI})")
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--runs", nargs="+", required=True, help="run names")
    args = parser.parse_args(argv)
    uri = args.tracking_uri or load_run_config("if-local").tracking_uri()
    client = MlflowClient(uri)
    for name in args.runs:
        run_id = find_run_id(uri, args.experiment, name)
        if run_id is None:
            raise SystemExit(f"no run named {name!r} in experiment {args.experiment!r} at {uri}")
        print(table(name, history(client, run_id)))
        print()


if __name__ == "__main__":
    main()
