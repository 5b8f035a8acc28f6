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

`--exposure` measures instead, in this process, how likely a token is to flip: the engine draws a token by inverse
CDF with one uniform number, so a draw changes exactly when the number picks different tokens under the two
cumulative distributions (F_batch and F_alone at the temperature):
each prompt's next-token distribution prefilled alone against prefilled in a batch of all of them (`flip_probability`:
one minus the measure of the numbers that pick the same token under both).
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


def flip_probabilities(model_dir: Path, bodies: list[dict], temperature: float) -> list[float]:
    """Per prompt: the probability that its seeded first token differs between a prefill alone and one in a batch of
    all the prompts (the L1 distance of the two cumulative distributions)."""
    import torch

    from engines.serving import kv_batch
    from engines.serving.model_holder import ModelHolder

    holder = ModelHolder(model_dir)
    holder.load()
    texts = [holder.tokenizer.apply_chat_template(body["messages"], add_generation_prompt=True, tokenize=False)
             for body in bodies]
    prompts = [holder.tokenizer.encode(text, add_special_tokens=False) for text in texts]
    pad = holder.tokenizer.pad_token_id if holder.tokenizer.pad_token_id is not None else 0
    with torch.inference_mode():
        _, batched_BV = kv_batch.prefill(holder.model, prompts, pad)
        alone_BV = torch.cat([kv_batch.prefill(holder.model, [prompt], pad)[1] for prompt in prompts])

    def cdf(logits_BV: torch.Tensor) -> torch.Tensor:
        cdf_BV = torch.cumsum(torch.softmax(logits_BV.double() / temperature, dim=-1), dim=-1)
        return cdf_BV / cdf_BV[:, -1:]  # the engine scales its uniform number by the last value

    return [flip_probability(a, b) for a, b in zip(cdf(batched_BV), cdf(alone_BV), strict=True)]


def flip_probability(cdf_a, cdf_b) -> float:
    """P(u picks different tokens under the two cumulative distributions), u uniform on [0, 1): 1 minus the measure
    of the u that land in the same token's interval under both, [max(F_a(i-1), F_b(i-1)), min(F_a(i), F_b(i)))."""
    import torch

    low_a, low_b = torch.cat([cdf_a.new_zeros(1), cdf_a[:-1]]), torch.cat([cdf_b.new_zeros(1), cdf_b[:-1]])
    agree = (torch.minimum(cdf_a, cdf_b) - torch.maximum(low_a, low_b)).clamp(min=0).sum()
    return max(0.0, 1.0 - float(agree))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--exposure", action="store_true", help="measure the per-token flip probability instead")
    args = parser.parse_args()
    bodies = [request_body(i, args.max_tokens, args.temperature) for i in range(args.requests)]
    if args.exposure:
        flips = flip_probabilities(prepare_model(args.model), bodies, args.temperature)
        print(f"{args.model}, T {args.temperature}, {len(flips)} prompts in one batch against each alone: "
              f"P(first token flips) mean {sum(flips) / len(flips):.2e}, max {max(flips):.2e}")
        return
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
