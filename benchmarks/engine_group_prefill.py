"""Benchmark: the embedded engine's generation thread serving group-shaped requests (`make train`'s engine load).

Run: `.venv/bin/python benchmarks/engine_group_prefill.py` (about a minute on 2 cores; `--json PATH` also writes the
figures). To compare with another commit's engine, run the same file with that commit's checkout first on the path:
`git worktree add /tmp/base <commit>; PYTHONPATH=/tmp/base .venv/bin/python benchmarks/engine_group_prefill.py`.
Not a timed test: numbers depend on the machine.

Workload: `--groups` groups of `--group-size` requests; every prompt starts with one system prompt of
`--system-tokens` tokens, a group's prompts continue with the group's own task of `--task-tokens` (so a group's
prompts are identical, as a GRPO group's are); each request generates `--answer-tokens` tokens (EOS ignored), sampled
at T 0.35. Requests arrive as harnesses send them: a group's members `--stagger-s` apart, the groups in turn (0: all
at once). The generation thread runs on one torch thread, as `make train`'s engine does. Reported: the wall time
from the first submission until every answer is done, and the prefix cache's counters (prompt tokens reused).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

import numpy as np
import torch

from engines.model_cache import prepare_model
from engines.serving.model_holder import ModelHolder
from engines.serving.sampling import RowSampling
from engines.serving.scheduler import GenerationParams, GenerationRequest, GenerationScheduler, TokenEvent


class Done:
    """Counts down finished requests."""

    def __init__(self, count: int) -> None:
        self.left, self.lock, self.event = count, threading.Lock(), threading.Event()

    def __call__(self, event: object) -> None:
        if isinstance(event, TokenEvent) and event.finish_reason is not None:
            with self.lock:
                self.left -= 1
                if self.left == 0:
                    self.event.set()


def prompts(args: argparse.Namespace) -> list[list[int]]:
    rng = np.random.default_rng(0)
    system = rng.integers(100, 40000, args.system_tokens).tolist()
    tasks = [rng.integers(100, 40000, args.task_tokens).tolist() for _ in range(args.groups)]
    return [system + task for task in tasks for _ in range(args.group_size)]


def run(args: argparse.Namespace) -> dict[str, object]:
    torch.set_num_threads(1)
    holder = ModelHolder(prepare_model(args.model))
    scheduler = GenerationScheduler(holder, max_batch_size=16, prefix_cache_tokens=16384)
    scheduler.start()
    try:
        all_prompts = prompts(args)
        done = Done(len(all_prompts))
        sampling = RowSampling(temperature=0.35, top_p=1.0, top_k=-1)
        started = time.perf_counter()
        for index, prompt in enumerate(all_prompts):
            params = GenerationParams(sampling=sampling, max_tokens=args.answer_tokens, ignore_eos=True, seed=index)
            scheduler.submit(GenerationRequest(prompt, params, done))
            time.sleep(args.stagger_s)
        if not done.event.wait(600):
            raise TimeoutError("the requests did not finish in 600 s")
        wall_s = time.perf_counter() - started
        stats = scheduler.prefix_cache.stats
        return {"workload": vars(args) | {"json": None}, "wall_s": wall_s,
                "prompt_tokens": sum(len(p) for p in all_prompts),
                "queried_tokens": stats.queried_tokens, "hit_tokens": stats.hit_tokens}
    finally:
        scheduler.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--system-tokens", type=int, default=75)
    parser.add_argument("--task-tokens", type=int, default=140)
    parser.add_argument("--answer-tokens", type=int, default=61)
    parser.add_argument("--stagger-s", type=float, default=0.3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    result = run(args)
    print(f"{result['wall_s']:.1f} s for {args.groups} x {args.group_size} requests; prompt tokens reused "
          f"{result['hit_tokens']:,} of {result['prompt_tokens']:,}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
