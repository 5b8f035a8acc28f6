"""Collocated async vs sync: the same heavy-tailed workload, the same batch and number of updates, both schedules.

Usage: python benchmarks/async_vs_sync.py [--updates 8] [--batch-groups 4] [--group-size 4] [--inflight-groups 12]
       [--median-s 3] [--sigma 1.1] [--calls 4] [--max-tokens 8] [--seed 0] [--engine-threads 1]
       [--schedules sync async]

Each schedule gets fresh services built by the flow's own setup (`flows.setup`: embedded engine on the tiny model,
gateway process, TorchBackend) and the controller's Reconciler in a thread, running `heavy_tail_harness.py` (k chat
calls with log-normal "tool" time between them, seeded per task and member, so both schedules see identical
durations). The loop is the training flow's iteration without Prefect and MLflow: fill the in-flight groups (the
ONLY difference: `flows.setup.in_flight_target`, one batch for sync, `max_inflight_groups` for async) -> wait for
`batch_groups` complete groups -> the flow's tasks (fill_in_flight, build_batch, update_policy). Prints a table; JSON to
benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from heavy_tail_harness import harness_sleeps_s
from heavy_tail_recipe import HeavyTailRecipe
from schedule_metrics import call_intervals, device_shares, lag_summary, spread_summary

from controller.config import ControllerConfig
from controller.reconcile import Reconciler
from controller.runners.local import LocalRunner
from engines.model_cache import resolve_model
from flows.config import RunConfig
from flows.prefect_tasks.rollouts import fill_in_flight
from flows.prefect_tasks.training import build_batch, update_policy
from flows.run_processes import RunProcesses
from flows.setup import (
    RunPlan,
    build_backend,
    feed_config,
    fresh_plan,
    in_flight_target,
    process_settings,
    task_stream,
)
from gateway.client import GatewayClient
from rollouts.feed import RolloutFeed
from trainer.backends.base import Backend

RESULTS_DIR = Path(__file__).parent / "results"
PHASES = ("rollout_s", "batch_s", "drain_s", "update_s", "checkpoint_s", "weight_sync_s")


@dataclass(frozen=True)
class BenchSettings:
    """The workload and the loop's sizes (shared by both schedules)."""

    updates: int
    """Policy updates per schedule."""
    batch_groups: int
    """Complete groups per update."""
    group_size: int
    """Rollouts per group."""
    inflight_groups: int
    """Groups kept in flight by the async schedule."""
    max_version_lag: int
    """Rollouts lagging more than this are dropped (the flow's default: 2)."""
    calls: int
    """Chat calls per rollout."""
    median_s: float
    """Median harness sleep per rollout."""
    sigma: float
    """Log-normal sigma of the harness sleep."""
    cap: float
    """Largest harness sleep, in medians."""
    max_tokens: int
    """Completion tokens per call."""
    seed: int
    """Task seed (the durations follow from it)."""

    def recipe(self) -> HeavyTailRecipe:
        return HeavyTailRecipe(self.calls, self.median_s, self.sigma, self.cap, self.max_tokens)


def run_config(s: BenchSettings, schedule: str, work_dir: Path) -> RunConfig:
    """The flow's run config for this benchmark (recipe is a required field; the controller runs HeavyTailRecipe)."""
    return RunConfig.model_validate({
        "recipe": "instruction_following", "name": f"bench-{schedule}-{s.seed}-{uuid.uuid4().hex[:6]}",
        "work_dir": str(work_dir),
        "rollout": {"group_size": s.group_size, "batch_groups": s.batch_groups, "schedule": schedule,
                    "max_inflight_groups": s.inflight_groups, "max_version_lag": s.max_version_lag,
                    "wait_timeout_s": 900},
        "engine": {"kind": "embedded", "model": "tiny", "max_batch_size": 32},
        "controller": {"start": False, "concurrency": s.group_size * max(s.inflight_groups, s.batch_groups)},
        "backend": {"kind": "torch", "optimizer": {"lr": 1e-5}},
        "algorithm": {"iterations": s.updates},
        "checkpoints": {"keep_local": 1},
    })


@contextmanager
def controller_thread(services: RunProcesses, config: RunConfig, recipe: HeavyTailRecipe,
                      run_dir: Path) -> Iterator[threading.Thread]:
    """The controller's Reconciler (LocalRunner) in a thread of this process, stopped on exit."""
    admin = GatewayClient(services.gateway_url, services.admin_token)
    grader = GatewayClient(services.gateway_url, services.grader_token)
    c = config.controller
    controller = ControllerConfig(gateway_url=services.gateway_url, controller_id=f"bench-{uuid.uuid4().hex[:6]}",
                                  concurrency=c.concurrency, recipe=recipe.name, lease_s=300.0, renew_every_s=60.0,
                                  poll_interval_s=0.1, harness_timeout_s=c.harness_timeout_s, kill_grace_s=1.0,
                                  work_dir=run_dir / "work", logs_dir=run_dir / "harness-logs")
    reconciler = Reconciler(controller, admin, grader, LocalRunner(c.concurrency, kill_grace_s=1.0),
                            recipes=lambda _name: recipe)
    stop = threading.Event()
    thread = threading.Thread(target=reconciler.run, args=(stop,), name="bench-controller", daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        stop.set()
        thread.join(timeout=60)
        admin.close()
        grader.close()


def run_loop(config: RunConfig, plan: RunPlan, services: RunProcesses, backend: Backend, rows: list[dict],
             updates: int, controller: threading.Thread) -> dict:
    """The flow's iterations until `updates` updates ran; per-iteration records, update intervals, lags."""
    r = config.rollout
    feed = RolloutFeed(services.admin, feed_config(config, plan), task_stream(rows, 0))
    records, update_intervals, lags, errors, dropped = [], [], [], [], 0
    start_s = time.time()
    while len(update_intervals) < updates:
        if len(records) >= 3 * updates:
            raise RuntimeError(f"{len(records)} iterations gave only {len(update_intervals)} updates: the batches "
                               f"had no signal; last rollout errors: {errors[-3:]}")
        version, began = backend.policy_version, time.perf_counter()
        fill_in_flight.fn(feed, in_flight_target(config), version)
        feed.wait_for(r.batch_groups, r.wait_timeout_s, on_poll=lambda _ready: _check_alive(controller))
        groups = feed.take(r.batch_groups)
        waited = time.perf_counter()
        batch, split = build_batch.fn(groups, version, r.max_version_lag, config.algorithm.advantage,
                                      config.algorithm.samples, r.pass_threshold)
        built = time.perf_counter()
        lags += split.lags
        errors += [rollout.error for g in groups for rollout in g.rollouts if rollout.error]
        dropped += split.dropped_rollouts
        record = {"version": version, "rollout_s": waited - began, "batch_s": built - waited,
                  "kept_rollouts": sum(len(g.rollouts) for g in split.kept), "dropped_rollouts": split.dropped_rollouts,
                  "in_flight_after": feed.in_flight, "ready_after": feed.ready}
        if not batch.no_signal:
            assert batch.batch is not None
            update_began = time.time()
            update = update_policy.fn(services.admin, services.engine, backend, batch, plan.checkpoint_root,
                                      config.gateway.model_name, r.drain_timeout_s, config.checkpoints.keep_local)
            update_intervals.append((update_began, time.time()))
            record.update(drain_s=update.drain_s, update_s=update.update_s, checkpoint_s=update.checkpoint_s,
                          weight_sync_s=update.weight_sync_s, samples=len(batch.batch.samples))
        record["iteration_s"] = time.perf_counter() - began
        records.append(record)
    return {"start_s": start_s, "end_s": time.time(), "records": records, "update_intervals": update_intervals,
            "lags": lags, "dropped": dropped, "submitted_groups": feed.next_task}


def _check_alive(controller: threading.Thread) -> None:
    if not controller.is_alive():
        raise RuntimeError("the controller thread stopped; its errors are in this process's log output")


def all_calls(admin: GatewayClient, prefix: str, groups: int, group_size: int) -> list:
    """Every call of every rollout the feed created (ids `{prefix}-{group}-{member}`)."""
    return [c for g in range(groups) for m in range(group_size) for c in admin.calls(f"{prefix}-{g}-{m}")]


def run_schedule(s: BenchSettings, schedule: str, work_root: Path) -> dict:
    """One schedule end to end on fresh services; its summary."""
    config = run_config(s, schedule, work_root)
    plan = fresh_plan(config, config.name, resolve_model(config.engine.model))
    backend = build_backend(config, plan)
    backend.load()
    rows = s.recipe().generate(s.updates * max(s.inflight_groups, s.batch_groups) * 3, s.seed)
    with RunProcesses(process_settings(config, plan)) as services:
        assert services.admin is not None
        with controller_thread(services, config, s.recipe(), plan.run_dir) as controller:
            loop = run_loop(config, plan, services, backend, rows, s.updates, controller)
        calls = all_calls(services.admin, feed_config(config, plan).id_prefix, loop["submitted_groups"],
                          s.group_size)
    return summarize(s, schedule, config, loop, calls, rows)


def summarize(s: BenchSettings, schedule: str, config: RunConfig, loop: dict, calls: list, rows: list[dict]) -> dict:
    """Wall clock, device shares, staleness, phase split and the workload's durations of one schedule."""
    start_s, end_s, records = loop["start_s"], loop["end_s"], loop["records"]
    wall_s = end_s - start_s
    phases = {p: sum(r.get(p, 0.0) for r in records) for p in PHASES}
    taken = len(records) * s.batch_groups * s.group_size
    sleeps = [sum(harness_sleeps_s(row["seed"], m, s.calls, s.median_s, s.sigma, s.cap))
              for row in rows[:loop["submitted_groups"]] for m in range(s.group_size)]
    trained = sum(r["kept_rollouts"] for r in records if "update_s" in r)
    return {"schedule": schedule, "in_flight_groups": in_flight_target(config), "wall_s": wall_s,
            "iterations": len(records), "updates": len(loop["update_intervals"]),
            "s_per_update": wall_s / max(len(loop["update_intervals"]), 1),
            **device_shares(loop["update_intervals"], call_intervals(calls), start_s, end_s),
            "phases_s": phases, "phase_shares": {p: v / wall_s for p, v in phases.items()},
            "lags": lag_summary(loop["lags"]), "taken_rollouts": taken, "dropped_rollouts": loop["dropped"],
            "trained_rollouts": trained, "s_per_trained_rollout": wall_s / max(trained, 1),
            "submitted_groups": loop["submitted_groups"], "calls": len(calls),
            "call_latency_s": spread_summary([c.latency_ms / 1000.0 for c in calls]),
            "harness_sleep_s": spread_summary(sleeps), "iterations_detail": records}


def print_table(results: list[dict]) -> None:
    """One markdown row per schedule."""
    print("| schedule | in flight | wall s | s/update | s/trained rollout | idle | update | generating | lag mean/max "
          "| dropped/taken | rollout wait / batch / drain / train / ckpt / refit (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        p = r["phases_s"]
        print(f"| {r['schedule']} | {r['in_flight_groups']} | {r['wall_s']:.1f} | {r['s_per_update']:.1f} | "
              f"{r['s_per_trained_rollout']:.2f} | "
              f"{r['idle_share']:.0%} | {r['update_share']:.0%} | {r['generating_share']:.0%} | "
              f"{r['lags']['mean']:.2f}/{r['lags']['max']} | {r['dropped_rollouts']}/{r['taken_rollouts']} | "
              + " / ".join(f"{p[k]:.1f}" for k in PHASES) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=8)
    parser.add_argument("--batch-groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--inflight-groups", type=int, default=12)
    parser.add_argument("--max-version-lag", type=int, default=2)
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--median-s", type=float, default=3.0)
    parser.add_argument("--sigma", type=float, default=1.1)
    parser.add_argument("--cap", type=float, default=20.0)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engine-threads", type=int, default=1,
                        help="OMP_NUM_THREADS of the engine (and harness) processes; this process keeps torch's own")
    parser.add_argument("--schedules", nargs="+", choices=("sync", "async"), default=["sync", "async"])
    parser.add_argument("--json", type=Path, default=None, help="results file (default: benchmarks/results/...)")
    args = parser.parse_args()
    s = BenchSettings(args.updates, args.batch_groups, args.group_size, args.inflight_groups, args.max_version_lag,
                      args.calls, args.median_s, args.sigma, args.cap, args.max_tokens, args.seed)
    os.environ["OMP_NUM_THREADS"] = str(args.engine_threads)  # read by the child processes only: torch is loaded
    loadavg_at_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="harnessrl-async-vs-sync-") as work:
        results = [run_schedule(s, schedule, Path(work)) for schedule in args.schedules]
    by_name = {r["schedule"]: r for r in results}
    ratio = by_name["sync"]["wall_s"] / by_name["async"]["wall_s"] if len(by_name) == 2 else None
    print_table(results)
    if ratio is not None:
        per_rollout = by_name["sync"]["s_per_trained_rollout"] / by_name["async"]["s_per_trained_rollout"]
        print(f"sync / async wall clock: {ratio:.2f}x (per trained rollout: {per_rollout:.2f}x)")
    out = args.json or RESULTS_DIR / f"async_vs_sync-seed{s.seed}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"settings": asdict(s), "ratio_sync_over_async": ratio, "results": results,
                               "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                                           "trainer_threads": torch.get_num_threads(),
                                           "engine_threads": args.engine_threads, "loadavg_at_start": loadavg_at_start,
                                           "loadavg_at_end": os.getloadavg()}}, indent=2))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
