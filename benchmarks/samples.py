"""Benchmark: sample-building throughput, and scheduling imbalance and padding waste.

Run: `.venv/bin/python benchmarks/samples.py` (about a minute on 2 cores). Prints a Markdown report;
`--json PATH` also writes the figures. Not a timed test: numbers depend on the machine.

Sample building: synthetic rollouts of `calls` calls whose context grows from a first prompt to
about `context` tokens at the last call (every call extends the previous context, so a rollout
merges into one sample); a second workload interleaves two conversations per rollout (a subagent).
Throughput is reported two ways: tokens in the built samples per second, and recorded call tokens
(every call's prompt + response, what the gateway stored and the merge compares) per second.

Scheduling: a realistic agentic length mix (log-normal sample lengths, 1-4 samples per rollout),
placed onto workers by Karmarkar-Karp versus greedy arrival-order placement, in packed and
padded micro-batches.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from trainer.samples import RecordedCall, build_samples
from trainer.scheduling import ScheduleConfig, schedule


def synthetic_calls(rollouts: int, calls: int, context: int, threads: int, seed: int) -> list[RecordedCall]:
    """Calls of `rollouts` rollouts; `threads` interleaved conversations share each rollout's calls."""
    rng = np.random.default_rng(seed)
    turn = context // (2 * calls)  # observation and response tokens per turn
    first_prompt = context - (2 * calls - 1) * turn
    recorded = []
    for r in range(rollouts):
        contexts: list[tuple[int, ...]] = [()] * threads
        for seq in range(calls):
            k = seq % threads
            new = first_prompt if not contexts[k] else turn
            prompt = contexts[k] + tuple(rng.integers(0, 49152, new).tolist())
            response = tuple(rng.integers(0, 49152, turn).tolist())
            logprobs = tuple((-rng.random(turn)).tolist())
            recorded.append(
                RecordedCall(f"r{r}", f"g{r // 8}", seq, prompt, response, logprobs, 0, True, "stop")
            )
            contexts[k] = prompt + response
    return recorded


def bench_build(recorded: list[RecordedCall], repeats: int) -> dict[str, float]:
    """Median and best wall time of `build_samples`, as sample and call tokens per second."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        batch = build_samples(recorded)
        times.append(time.perf_counter() - start)
    call_tokens = sum(len(c.prompt_token_ids) + len(c.response_token_ids) for c in recorded)
    median, best = statistics.median(times), min(times)
    return {
        "samples": batch.stats.samples,
        "sample_tokens": batch.stats.tokens,
        "call_tokens": call_tokens,
        "median_s": median,
        "sample_tokens_per_s_median": batch.stats.tokens / median,
        "sample_tokens_per_s_best": batch.stats.tokens / best,
        "call_tokens_per_s_median": call_tokens / median,
    }


class _Seq:
    """A schedulable sample stand-in: rollout id and length."""

    def __init__(self, rollout_id: str, num_tokens: int) -> None:
        self.rollout_id = rollout_id
        self.num_tokens = num_tokens


def realistic_mix(rollouts: int, seed: int) -> list[_Seq]:
    """Log-normal lengths (median about 3k tokens, long tail to 16k), 1-4 samples per rollout."""
    rng = np.random.default_rng(seed)
    seqs = []
    for r in range(rollouts):
        for _ in range(int(rng.choice([1, 1, 1, 2, 2, 3, 4]))):
            seqs.append(_Seq(f"r{r}", int(np.clip(rng.lognormal(np.log(3000), 0.7), 256, 16384))))
    return seqs


def bench_schedule(seqs: list[_Seq], workers: int, updates: int, budget: int) -> list[dict[str, object]]:
    """Imbalance, padding waste and budget fill for each balancer x layout (x row rounding)."""
    rows = []
    for balancer in ("karmarkar_karp", "greedy"):
        for layout, multiple in (("packed", 1), ("packed", 128), ("padded", 1)):
            config = ScheduleConfig(
                num_workers=workers,
                num_updates=updates,
                max_tokens_per_micro_batch=budget,
                layout=layout,
                balancer=balancer,
                pad_to_multiple=multiple,
            )
            start = time.perf_counter()
            plan = schedule(seqs, config)
            elapsed_ms = (time.perf_counter() - start) * 1000
            rows.append(
                {
                    "balancer": balancer,
                    "layout": f"{layout}, rows to x{multiple}",
                    "schedule_ms": elapsed_ms,
                    **plan.metrics,
                }
            )
    return rows


def report(builds: dict[str, dict[str, float]], scheduling: list[dict[str, object]], seqs: int) -> str:
    lines = [
        "| workload | samples | sample tokens | sample tokens/s (median / best) | call tokens/s (median) |",
        "|---|---|---|---|---|",
    ]
    for name, r in builds.items():
        lines.append(
            f"| {name} | {r['samples']:,} | {r['sample_tokens']:,} | "
            f"{r['sample_tokens_per_s_median'] / 1e6:.1f}M / {r['sample_tokens_per_s_best'] / 1e6:.1f}M | "
            f"{r['call_tokens_per_s_median'] / 1e6:.1f}M |"
        )
    lines += [
        "",
        f"Scheduling {seqs:,} sequences:",
        "",
        "| balancer | layout | imbalance max/mean | padding waste | budget fill | micro-batches/worker "
        "| ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in scheduling:
        lines.append(
            f"| {r['balancer']} | {r['layout']} | {r['schedule/imbalance_max']:.5f} | "
            f"{r['schedule/padding_waste']:.1%} | {r['schedule/budget_fill']:.1%} | "
            f"{r['schedule/micro_batches_per_worker_min']:.0f}-"
            f"{r['schedule/micro_batches_per_worker_max']:.0f} | {r['schedule_ms']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--context", type=int, default=2048, help="tokens in a rollout's last context")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--updates", type=int, default=4)
    parser.add_argument("--budget", type=int, default=16384, help="tokens per micro-batch")
    parser.add_argument("--schedule-rollouts", type=int, default=512)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    builds = {}
    for name, threads in (("one conversation", 1), ("two interleaved conversations", 2)):
        recorded = synthetic_calls(args.rollouts, args.calls, args.context, threads, seed=0)
        builds[f"{args.rollouts} rollouts x {args.calls} calls, {args.context}-token context, {name}"] = (
            bench_build(recorded, args.repeats)
        )
    seqs = realistic_mix(args.schedule_rollouts, seed=0)
    scheduling = bench_schedule(seqs, args.workers, args.updates, args.budget)
    print(report(builds, scheduling, len(seqs)))
    print(f"\n{args.workers} workers, {args.updates} updates, budget {args.budget} tokens per micro-batch.")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"build": builds, "schedule": scheduling}, indent=2))


if __name__ == "__main__":
    main()
