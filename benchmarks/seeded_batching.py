"""Embedded engine: does a seeded request give the same tokens whatever else is in the batch (and after the prefix
cache holds its prompt)?

Usage: python benchmarks/seeded_batching.py [--model smollm2-135m-instruct] [--requests 16] [--max-tokens 48]
    [--temperature 0.7]
Starts the real server (EmbeddedEngine) and sends the same seeded chat requests (distinct prompts, arithmetic
questions as the calculator recipe asks) in four schedules: one at a time (prefix cache cold), one at a time again
(prompts now in the prefix cache), all together (one batch), and half as many at once in reverse order (other
batch compositions). Each schedule is compared with the first, request by request: identical token ids, or the
position of the first different token. Prints a markdown table; JSON to benchmarks/results/seeded_batching.json.
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
            "temperature": temperature, "seed": 1000 + i, "return_token_ids": True}


async def run_schedule(base_url: str, bodies: list[dict], at_once: int, reverse: bool = False) -> list[list[int]]:
    """The completion token ids of every body, sent `at_once` at a time (in reverse order when asked)."""
    order = list(range(len(bodies)))[::-1] if reverse else list(range(len(bodies)))
    tokens: dict[int, list[int]] = {}
    async with httpx.AsyncClient(base_url=f"{base_url}/v1", timeout=900) as client:
        async def one(i: int) -> None:
            response = await client.post("/chat/completions", json=bodies[i])
            response.raise_for_status()
            tokens[i] = response.json()["choices"][0]["token_ids"]

        for start in range(0, len(order), at_once):
            await asyncio.gather(*(one(i) for i in order[start:start + at_once]))
    return [tokens[i] for i in range(len(bodies))]


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where the two token lists differ (None: identical)."""
    for position, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return position
    return None if len(a) == len(b) else min(len(a), len(b))


def compare(reference: list[list[int]], other: list[list[int]]) -> dict:
    differences = [first_difference(a, b) for a, b in zip(reference, other, strict=True)]
    diverged = [d for d in differences if d is not None]
    return {"identical": len(differences) - len(diverged), "requests": len(differences),
            "first_difference_positions": diverged}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=0.7)
    args = parser.parse_args()
    bodies = [request_body(i, args.max_tokens, args.temperature) for i in range(args.requests)]
    engine = EmbeddedEngine(prepare_model(args.model), served_model_name="bench", max_batch_size=args.requests)
    with engine:
        url = engine.base_url
        cold = asyncio.run(run_schedule(url, bodies, 1))
        schedules = {"one at a time, prompts in the prefix cache": asyncio.run(run_schedule(url, bodies, 1)),
                     f"all {args.requests} at once": asyncio.run(run_schedule(url, bodies, args.requests)),
                     f"{args.requests // 2} at once, reverse order": asyncio.run(
                         run_schedule(url, bodies, max(args.requests // 2, 1), reverse=True))}
    rows = {name: compare(cold, tokens) for name, tokens in schedules.items()}
    RESULTS_DIR.mkdir(exist_ok=True)
    report = {"model": args.model, "temperature": args.temperature, "max_tokens": args.max_tokens, "rows": rows}
    (RESULTS_DIR / "seeded_batching.json").write_text(json.dumps(report, indent=2))
    print(f"{args.model}, T {args.temperature}, {args.max_tokens} tokens; compared with one at a time, cold cache:")
    print("| schedule | identical completions | first different token (diverged requests) |")
    print("|---|---|---|")
    for name, row in rows.items():
        print(f"| {name} | {row['identical']} of {row['requests']} | {row['first_difference_positions'] or '-'} |")


if __name__ == "__main__":
    main()
