"""Responses chains: the latency of a call that continues a deep chain by `previous_response_id`, against the same
conversation sent whole, through the gateway's real server process.

For each depth in `--depths` a chain of that many Responses calls is built on one rollout (each call continues the
previous answer with a new user message of `--message-chars` characters; `--instructions-chars` of instructions on
every call, which a continuation does not carry over, as OpenAI documents). Then `--calls` pairs of calls are timed,
one client, interleaved: a call continuing the chain's last answer (`previous_response_id`), and a call sending the
conversation the chain holds whole in `input` (every earlier input and output item) with the same new message. Both
go to the engine as the same chat request. The upstream is `gateway.scripted` (64 answer tokens, instant). With
`--baseline COMMIT ...` each commit's gateway (a git worktree, as in `gateway_overhead.py`) runs beside the working
tree's, each with its own chain, measured in turn. Run:
`.venv/bin/python benchmarks/responses_chain.py [--depths 150] [--instructions-chars 0] [--calls 20] [--rounds 3]
[--store sqlite-NORMAL] [--baseline COMMIT ...] [--json out.json]`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.gateway_overhead import (  # noqa: E402
    GATEWAY_CORE,
    LOAD_CORE,
    STORES,
    _has_taskset,
    _stop,
    pinned,
    setup_gateway,
)
from benchmarks.gateway_variants import Variant, commit_variant, spread, tree_variant  # noqa: E402
from tests.gateway.support import free_port, wait_healthy  # noqa: E402

MODEL = "gpt-5-codex"


def message(turn: int, chars: int) -> dict:
    """The user message of one turn, `chars` characters long."""
    text = (f"Turn {turn}: run the next step and report what changed. " * (chars // 40 + 1))[:chars]
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def request(items: list[dict], instructions: str, previous: str | None) -> dict:
    body = {"model": MODEL, "input": items, "max_output_tokens": 64, "store": True}
    if instructions:
        body["instructions"] = instructions
    if previous is not None:
        body["previous_response_id"] = previous
    return body


def post(client: httpx.Client, url: str, key: str, body: dict) -> tuple[dict, float]:
    """(the answer, its latency in ms)."""
    started = time.perf_counter()
    answer = client.post(url, json=body, headers={"authorization": f"Bearer {key}"})
    elapsed_ms = (time.perf_counter() - started) * 1000
    if answer.status_code != 200:
        raise RuntimeError(f"HTTP {answer.status_code}: {answer.text[:500]}")
    return answer.json(), elapsed_ms


def build_chain(client: httpx.Client, url: str, key: str, depth: int, args: argparse.Namespace,
                instructions: str) -> tuple[str, list[dict]]:
    """A chain of `depth` calls; (its last answer's id, the conversation it holds as input items)."""
    conversation: list[dict] = []
    previous = None
    for turn in range(depth):
        item = message(turn, args.message_chars)
        answer, _ = post(client, url, key, request([item], instructions, previous))
        conversation += [item, *answer["output"]]
        previous = answer["id"]
    return previous, conversation


def measure(client: httpx.Client, url: str, key: str, last: str, conversation: list[dict], depth: int,
            args: argparse.Namespace, instructions: str) -> dict:
    """`args.calls` chained and whole calls, interleaved: their latencies (ms), p50 and range."""
    times: dict[str, list[float]] = {"chained": [], "whole": []}
    for i in range(args.calls):
        item = message(depth + i, args.message_chars)
        for mode in (("chained", "whole") if i % 2 == 0 else ("whole", "chained")):
            body = (request([item], instructions, last) if mode == "chained"
                    else request([*conversation, item], instructions, None))
            times[mode].append(post(client, url, key, body)[1])
    return {mode: {"p50_ms": statistics.median(values), "min_ms": min(values), "max_ms": max(values)}
            for mode, values in times.items()}


def start_chains(args: argparse.Namespace, variants: list[Variant], workdir: Path, cleanup: contextlib.ExitStack,
                 client: httpx.Client, upstream_url: str, instructions: str) -> dict[tuple[str, int], tuple]:
    """Each variant's gateway with one chain per depth: (variant, depth) -> (URL, key, the chain's last answer id,
    its conversation)."""
    chains = {}
    for variant in variants:
        process, rollouts = setup_gateway(args.store, variant, workdir, cleanup, {}, upstream_url, len(args.depths),
                                          None)
        cleanup.callback(_stop, process)
        for depth, (base_url, key) in zip(args.depths, rollouts, strict=True):
            url = base_url + "/responses"
            chains[(variant.name, depth)] = (url, key, *build_chain(client, url, key, depth, args, instructions))
    return chains


def report(variant: str, depth: int, r: int, args: argparse.Namespace, point: dict) -> dict:
    chained, whole = point["chained"], point["whole"]
    ratio = chained["p50_ms"] / whole["p50_ms"]
    print(f"{variant:>9} depth {depth:>4} instructions {args.instructions_chars:>6} chars round {r} | chained p50 "
          f"{chained['p50_ms']:.2f} ms | whole p50 {whole['p50_ms']:.2f} ms | chained/whole {ratio:.2f}", flush=True)
    return {"variant": variant, "depth": depth, "round": r, "instructions_chars": args.instructions_chars, **point,
            "ratio": ratio}


def run(args: argparse.Namespace) -> list[dict]:
    """Every variant's gateway with its chains, then the rounds: each depth, each variant in turn (order rotated)."""
    instructions = ("You are a careful engineer. " * (args.instructions_chars // 28 + 1))[:args.instructions_chars]
    up_port = free_port()
    upstream = pinned(LOAD_CORE, [sys.executable, "-m", "gateway.scripted", "--port", str(up_port)])
    upstream_url = f"http://127.0.0.1:{up_port}/v1"
    wait_healthy(upstream_url + "/models", upstream)
    if _has_taskset():
        os.sched_setaffinity(0, {LOAD_CORE})
    results = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as cleanup, httpx.Client(timeout=60) as client:
        cleanup.callback(upstream.terminate)
        variants: list[Variant] = [tree_variant(), *(commit_variant(c, cleanup) for c in args.baseline)]
        chains = start_chains(args, variants, Path(tmp), cleanup, client, upstream_url, instructions)
        for r in range(args.rounds):
            for depth in args.depths:
                for variant in variants[r % len(variants):] + variants[:r % len(variants)]:
                    url, key, last, conversation = chains[(variant.name, depth)]
                    point = measure(client, url, key, last, conversation, depth, args, instructions)
                    results.append(report(variant.name, depth, r, args, point))
    return results


def summary(results: list[dict]) -> list[dict]:
    """Per variant and depth: chained and whole p50 and their ratio, median and range over rounds."""
    rows = []
    for key in dict.fromkeys((r["variant"], r["depth"]) for r in results):
        mine = [r for r in results if (r["variant"], r["depth"]) == key]
        row = {"variant": key[0], "depth": key[1], "chained_p50_ms": spread([r["chained"]["p50_ms"] for r in mine]),
               "whole_p50_ms": spread([r["whole"]["p50_ms"] for r in mine]),
               "ratio": spread([r["ratio"] for r in mine])}
        rows.append(row)
        print(f"{row['variant']:>9} depth {row['depth']:>4} | chained p50 {row['chained_p50_ms']['median']:.2f} ms "
              f"[{row['chained_p50_ms']['min']:.2f}-{row['chained_p50_ms']['max']:.2f}] | whole p50 "
              f"{row['whole_p50_ms']['median']:.2f} ms [{row['whole_p50_ms']['min']:.2f}-"
              f"{row['whole_p50_ms']['max']:.2f}] | chained/whole {row['ratio']['median']:.2f} "
              f"[{row['ratio']['min']:.2f}-{row['ratio']['max']:.2f}]", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--depths", type=int, nargs="+", default=[150])
    parser.add_argument("--instructions-chars", type=int, default=0)
    parser.add_argument("--message-chars", type=int, default=200)
    parser.add_argument("--calls", type=int, default=20, help="chained and whole calls timed per point")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--store", choices=STORES, default="sqlite-NORMAL")
    parser.add_argument("--baseline", nargs="*", default=[], metavar="COMMIT")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    load_before = os.getloadavg()
    results = run(args)
    rows = summary(results)
    if args.json:
        args.json.write_text(json.dumps({"args": {k: (str(v) if isinstance(v, Path) else v)
                                                  for k, v in vars(args).items()},
                                         "load_average_before": load_before, "load_average_after": os.getloadavg(),
                                         "gateway_core": GATEWAY_CORE if _has_taskset() else None,
                                         "results": results, "summary": rows}, indent=2))


if __name__ == "__main__":
    main()
