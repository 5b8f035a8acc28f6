"""Embedded engine: throughput of 16 concurrent requests (continuous batching) vs one at a time.

Usage: python benchmarks/engine_batching.py [--models tiny smollm2-135m-instruct] [--concurrency 16]
[--dtypes float32 bfloat16] [--prompt-words 0 150]
Starts the real server per model and dtype (EmbeddedEngine), sends identical sampled chat requests with ignore_eos,
and prints completion tokens per second for both schedules as a markdown table (JSON to benchmarks/results/), with
the wall time of each schedule (prompt processing included: `--prompt-words` lengthens every prompt, 150 words being
about the 170-token prompts of `make train`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import subprocess
import time
from pathlib import Path

import httpx

from engines.embedded import DTYPES, EmbeddedEngine
from engines.model_cache import prepare_model

RESULTS_DIR = Path(__file__).parent / "results"


def request_body(i: int, max_tokens: int, prompt_words: int = 0) -> dict:
    """A chat request with a prompt length that varies with `i` (`prompt_words` more words of context)."""
    words = " ".join(["agent"] * (5 + 3 * (i % 7) + prompt_words))
    return {"model": "bench", "messages": [{"role": "user", "content": f"Task {i}: {words}"}],
            "max_tokens": max_tokens, "temperature": 1.0, "seed": i, "ignore_eos": True}


async def run_schedule(base_url: str, count: int, max_tokens: int, concurrent: bool,
                       prompt_words: int = 0) -> tuple[int, float]:
    """(completion tokens, seconds) for `count` requests sent together or one after another."""
    async with httpx.AsyncClient(base_url=f"{base_url}/v1", timeout=600) as client:
        async def one(i: int) -> int:
            response = await client.post("/chat/completions", json=request_body(i, max_tokens, prompt_words))
            response.raise_for_status()
            return response.json()["usage"]["completion_tokens"]

        started_s = time.perf_counter()
        if concurrent:
            tokens = sum(await asyncio.gather(*(one(i) for i in range(count))))
        else:
            tokens = sum([await one(i) for i in range(count)])
        return tokens, time.perf_counter() - started_s


def measure(model: str, concurrency: int, max_tokens: int, dtype: str = "float32", prompt_words: int = 0) -> dict:
    """Both schedules on one server (after a warm-up request)."""
    engine = EmbeddedEngine(prepare_model(model), served_model_name="bench", max_batch_size=concurrency, dtype=dtype)
    with engine:
        url = engine.base_url
        asyncio.run(run_schedule(url, 1, 4, concurrent=False))
        seq_tokens, seq_s = asyncio.run(run_schedule(url, concurrency, max_tokens, False, prompt_words))
        bat_tokens, bat_s = asyncio.run(run_schedule(url, concurrency, max_tokens, True, prompt_words))
    return {"model": model, "dtype": dtype, "prompt_words": prompt_words, "requests": concurrency,
            "max_tokens": max_tokens,
            "sequential_tokens_per_s": seq_tokens / seq_s, "sequential_s": seq_s,
            "batched_tokens_per_s": bat_tokens / bat_s, "batched_s": bat_s, "speedup": seq_s / bat_s}


def cpu_model() -> str:
    """lscpu's model name, or the platform's processor string."""
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return platform.processor() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny", "smollm2-135m-instruct"])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, nargs="+", default=None,
                        help="Per model (default 64 for tiny, 24 otherwise).")
    parser.add_argument("--dtypes", nargs="+", default=["float32"], choices=DTYPES)
    parser.add_argument("--prompt-words", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    budgets = args.max_tokens or [64 if m == "tiny" else 24 for m in args.models]
    rows = [measure(model, args.concurrency, budget, dtype, words)
            for model, budget in zip(args.models, budgets, strict=True)
            for words in args.prompt_words for dtype in args.dtypes]
    RESULTS_DIR.mkdir(exist_ok=True)
    report = {"cpu": cpu_model(), "rows": rows}
    (RESULTS_DIR / "engine_batching.json").write_text(json.dumps(report, indent=2))
    print(f"CPU: {cpu_model()}")
    print("| model | dtype | extra prompt words | requests x max_tokens | one at a time (tok/s) | batched (tok/s) "
          "| speed-up |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['dtype']} | {r['prompt_words']} | {r['requests']} x {r['max_tokens']} "
              f"| {r['sequential_tokens_per_s']:.1f} "
              f"({r['sequential_s']:.1f} s) | {r['batched_tokens_per_s']:.1f} ({r['batched_s']:.1f} s) | "
              f"{r['speedup']:.1f}x |")


if __name__ == "__main__":
    main()
