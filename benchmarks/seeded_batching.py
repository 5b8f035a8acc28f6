"""Embedded engine: does a seeded request give the same tokens whatever else is in the batch (and after the prefix
cache holds its prompt)?

Usage: python benchmarks/seeded_batching.py [--model smollm2-135m-instruct] [--requests 8] [--max-tokens 32]
    [--temperature 0.7]
Starts the real server (EmbeddedEngine) and sends the same seeded chat requests (distinct prompts, arithmetic
questions as the calculator recipe asks) in four schedules: one at a time (prefix cache cold), one at a time again
(prompts now in the prefix cache), all together (one batch), and half as many at once in reverse order (other
batch compositions). Each schedule is compared with the first, request by request: identical token ids, or the
position of the first different token, and the largest difference of the sampled tokens' logprobs before it. Prints
a markdown table; JSON to benchmarks/results/seeded_batching.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from pathlib import Path

import httpx

from engines.embedded import EmbeddedEngine
from engines.model_cache import prepare_model

RESULTS_DIR = Path(__file__).parent / "results"


def request_body(i: int, max_tokens: int, temperature: float) -> dict:
    """A seeded chat request whose prompt (and length) varies with `i`."""
    rng = random.Random(i)
    a, b = rng.randint(100, 999), rng.randint(10, 99)
    question = f"What is {a} {'+' if i % 2 else '*'} {b}? Think step by step." + " Be careful." * (i % 5)
    return {"model": "bench", "messages": [{"role": "user", "content": question}], "max_tokens": max_tokens,
            "temperature": temperature, "seed": 1000 + i, "return_token_ids": True, "logprobs": True}


Answer = tuple[list[int], list[float]]
"""A completion's token ids and their logprobs."""


async def run_schedule(base_url: str, bodies: list[dict], at_once: int, reverse: bool = False) -> list[Answer]:
    """The completion (token ids, logprobs) of every body, sent `at_once` at a time (in reverse order when asked)."""
    order = list(range(len(bodies)))[::-1] if reverse else list(range(len(bodies)))
    tokens: dict[int, Answer] = {}
    async with httpx.AsyncClient(base_url=f"{base_url}/v1", timeout=900) as client:
        async def one(i: int) -> None:
            response = await client.post("/chat/completions", json=bodies[i])
            response.raise_for_status()
            choice = response.json()["choices"][0]
            tokens[i] = (choice["token_ids"], [entry["logprob"] for entry in choice["logprobs"]["content"]])

        for start in range(0, len(order), at_once):
            await asyncio.gather(*(one(i) for i in order[start:start + at_once]))
    return [tokens[i] for i in range(len(bodies))]


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where the two token lists differ (None: identical)."""
    for position, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return position
    return None if len(a) == len(b) else min(len(a), len(b))


def compare(reference: list[Answer], other: list[Answer]) -> dict:
    """Identical token sequences, where the others diverge, and the largest |logprob difference| over the tokens
    before any divergence (0: the floats too are the same)."""
    differences = [first_difference(a[0], b[0]) for a, b in zip(reference, other, strict=True)]
    diverged = [d for d in differences if d is not None]
    gaps = [abs(x - y) for (ta, la), (tb, lb), d in zip(reference, other, differences, strict=True)
            for x, y in list(zip(la, lb, strict=False))[:d]]
    return {"identical": len(differences) - len(diverged), "requests": len(differences),
            "first_difference_positions": diverged, "max_abs_logprob_difference": max(gaps, default=0.0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=0.7)
    args = parser.parse_args()
    bodies = [request_body(i, args.max_tokens, args.temperature) for i in range(args.requests)]
    engine = EmbeddedEngine(prepare_model(args.model), served_model_name="bench", max_batch_size=args.requests)
    with engine:
        url = engine.base_url
        cold = asyncio.run(run_schedule(url, bodies, 1))
        plan = {"one at a time, prompts in the prefix cache": (1, False), f"all {args.requests} at once":
                (args.requests, False), f"{max(args.requests // 2, 1)} at once, reverse order":
                (max(args.requests // 2, 1), True)}
        rows = {}
        for name, (at_once, reverse) in plan.items():
            rows[name] = compare(cold, asyncio.run(run_schedule(url, bodies, at_once, reverse)))
            print(f"{name}: {rows[name]}", flush=True)
    RESULTS_DIR.mkdir(exist_ok=True)
    report = {"model": args.model, "temperature": args.temperature, "max_tokens": args.max_tokens, "rows": rows}
    (RESULTS_DIR / "seeded_batching.json").write_text(json.dumps(report, indent=2))
    print(f"{args.model}, T {args.temperature}, {args.max_tokens} tokens; compared with one at a time, cold cache:")
    print("| schedule | identical completions | first different token (diverged requests) | max abs logprob "
          "difference |")
    print("|---|---|---|---|")
    for name, row in rows.items():
        print(f"| {name} | {row['identical']} of {row['requests']} | {row['first_difference_positions'] or '-'} | "
              f"{row['max_abs_logprob_difference']:.2e} |")


if __name__ == "__main__":
    main()
