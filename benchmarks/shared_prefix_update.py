"""Benchmark: a training step of the torch backend on group-shaped batches, padded against shared_prefix.

Run: `.venv/bin/python benchmarks/shared_prefix_update.py` (about 4 minutes on 2 cores). Prints a Markdown table;
`--json PATH` also writes the figures. Not a timed test: numbers depend on the machine.

Workload (`make train`'s shape by default): `--groups` groups of `--group-size` one-call rollouts; a group's rollouts
answer one prompt of `--prompt-tokens` tokens (random IDs), each with its own answer of `--answer-tokens`; the
schedule of `deploy/configs/swe-local.yaml` (2 optimizer updates, micro-batches of at most 2,048 tokens). Each
layout's backend starts from the same weights and takes the same steps at lr 0 (the weights never change, so every
round times the same computation); the layouts run round-robin, one step each per round, so machine noise hits them
alike. Reported: the best and median step time after one warm-up round, the tokens each layout computes, and the
largest difference between the two layouts' gradients (the change is one of speed: both compute the same update).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from engines.model_cache import prepare_model
from trainer.backends.base import TrainBatch
from trainer.backends.torch import OptimizerConfig, TorchBackend, TorchBackendConfig
from trainer.samples import RecordedCall, build_samples
from trainer.scheduling import ScheduleConfig

LAYOUTS = ("padded", "shared_prefix")


def group_batch(groups: int, group_size: int, prompt_tokens: int, answer_tokens: int, seed: int = 0) -> TrainBatch:
    """`groups` x `group_size` single-call rollouts, one prompt per group, answers of +-10% `answer_tokens`."""
    rng = np.random.default_rng(seed)
    calls = []
    for group in range(groups):
        prompt = tuple(rng.integers(1, 49152, prompt_tokens).tolist())
        for member in range(group_size):
            length = max(1, int(answer_tokens * rng.uniform(0.9, 1.1)))
            answer = tuple(rng.integers(1, 49152, length).tolist())
            logprobs = tuple((-rng.uniform(0.1, 3.0, length)).tolist())
            calls.append(RecordedCall(f"g{group}r{member}", f"g{group}", 0, prompt, answer, logprobs, 0, True, "stop"))
    samples = build_samples(calls).samples
    return TrainBatch.of(samples, rng.normal(size=len(samples)))


def run(args: argparse.Namespace) -> dict[str, object]:
    torch.manual_seed(0)
    model_dir = prepare_model(args.model)
    batch = group_batch(args.groups, args.group_size, args.prompt_tokens, args.answer_tokens)
    backends = {}
    for layout in LAYOUTS:
        schedule = ScheduleConfig(num_updates=args.num_updates, max_tokens_per_micro_batch=args.budget, layout=layout)
        backend = TorchBackend(TorchBackendConfig(model_dir, optimizer=OptimizerConfig(lr=0.0), schedule=schedule))
        backend.load()
        backends[layout] = backend
    times: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
    metrics: dict[str, dict[str, float]] = {}
    for round_index in range(args.rounds + 1):
        for layout, backend in backends.items():
            started = time.perf_counter()
            metrics[layout] = dict(backend.train_step(batch))
            if round_index > 0:
                times[layout].append(time.perf_counter() - started)
    grads = {layout: backend.batch_gradient(batch) for layout, backend in backends.items()}
    scale = float(grads["padded"].abs().max())
    return {
        "workload": vars(args) | {"json": None},
        "tokens": sum(s.num_tokens for s in batch.samples),
        "torch_threads": torch.get_num_threads(),
        "layouts": {
            layout: {
                "best_s": min(times[layout]),
                "median_s": statistics.median(times[layout]),
                "steps_s": times[layout],
                "computed_tokens": (metrics[layout]["schedule/tokens"]
                                    - metrics[layout]["schedule/shared_prefix_tokens"]),
                "micro_batches": metrics[layout]["schedule/micro_batches"],
            }
            for layout in LAYOUTS
        },
        "gradient_max_abs_diff_over_max": float((grads["padded"] - grads["shared_prefix"]).abs().max()) / scale,
    }


def table(result: dict) -> str:
    lines = ["| layout | tokens computed | micro-batches | best step (s) | median step (s) |", "|---|---|---|---|---|"]
    for layout, row in result["layouts"].items():
        lines.append(f"| {layout} | {row['computed_tokens']:,.0f} of {result['tokens']:,} | {row['micro_batches']:.0f} "
                     f"| {row['best_s']:.1f} | {row['median_s']:.1f} |")
    padded, shared = (result["layouts"][layout] for layout in LAYOUTS)
    lines.append(f"\npadded / shared_prefix, best: {padded['best_s'] / shared['best_s']:.2f}x; "
                 f"gradients differ by {result['gradient_max_abs_diff_over_max']:.1e} of the largest")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--prompt-tokens", type=int, default=215)
    parser.add_argument("--answer-tokens", type=int, default=61)
    parser.add_argument("--num-updates", type=int, default=2)
    parser.add_argument("--budget", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    result = run(args)
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
