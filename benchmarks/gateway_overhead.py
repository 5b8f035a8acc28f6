"""Gateway overhead: added latency (p50/p99) and throughput versus calling the upstream directly, per store.

The upstream is `gateway.scripted` (instant answers in vLLM's shapes: 512 prompt token IDs, 64 response token IDs with
logprobs). The gateway runs as its real server process on a fresh store, pinned to one core (taskset); the upstream
and the load generator share the other core. Every call through the gateway is durably committed before its reply.
One invocation measures each store side by side: SQLite with synchronous=FULL, SQLite with synchronous=NORMAL, and a
real PostgreSQL server (fsync and synchronous commits on, pinned to the gateway's core: everything that makes a call
durable shares that core, as with SQLite). Each harness protocol in `--protocols` is measured through the same
gateway: `chat` (passed through byte for byte), `messages` (Anthropic Messages) and `responses` (OpenAI Responses),
both translated to chat completions and back (the three bodies carry the same tool); the difference of their p50
at the same point is the translation's overhead. Run:
`.venv/bin/python benchmarks/gateway_overhead.py [--seconds 5] [--stores sqlite-FULL sqlite-NORMAL postgres]
[--protocols chat messages responses] [--telemetry off on] [--rounds 1] [--baseline COMMIT ...] [--json out.json]`;
the stores' gateways run at once and each point is measured store after store, protocol after protocol. With
`--telemetry off on` each store's gateway runs twice, without any OTEL_* variable and exporting a span per call over
OTLP/HTTP (`+otel`). With `--baseline COMMIT ...` each commit's gateway (a git worktree the script checks out and
removes) runs beside the working tree's on its own store, and every point is measured for each of them in turn (the
order rotated from round to round), so a change to the hot path is measured A/B under the same load; a summary per
point gives medians and ranges over rounds and the working tree's calls/s and CPU per call over each baseline's,
paired by round.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.gateway_variants import (  # noqa: E402
    Variant,
    commit_variant,
    gateway_env_and_cwd,
    print_summary,
    summarize_variants,
    tree_variant,
)
from gateway.proxy import CHAT, parse_request, upstream_request  # noqa: E402
from gateway.records import RolloutMode  # noqa: E402
from gateway.scripted import Script, chat_answer  # noqa: E402
from gateway.translated import prepare  # noqa: E402
from tests.gateway.otlp_receiver import OtlpReceiver  # noqa: E402
from tests.gateway.support import ADMIN_TOKEN, free_port, wait_healthy  # noqa: E402
from tests.services import PostgresServer, postgres_bin_dir  # noqa: E402

STORES = ("sqlite-FULL", "sqlite-NORMAL", "postgres")
"""The stores measured: SQLite at a synchronous level (the gateway's `sqlite_synchronous`), or PostgreSQL."""
GATEWAY_CORE, LOAD_CORE = 0, 1

TOOL_NAME, TOOL_DESCRIPTION = "Bash", "Run a shell command"
TOOL_PARAMETERS = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
"""The one tool every protocol's body offers (in its own shape), so each engine-bound chat request carries it."""
BODY = json.dumps({"model": "policy", "max_tokens": 64, "temperature": 1.0,
                   "messages": [{"role": "system", "content": "You are a careful engineer."},
                                {"role": "user", "content": "Fix the failing test in utils.py."}],
                   "tools": [{"type": "function", "function": {"name": TOOL_NAME, "description": TOOL_DESCRIPTION,
                                                               "parameters": TOOL_PARAMETERS}}]}).encode()
MESSAGES_BODY = json.dumps({"model": "claude-opus-5-5", "max_tokens": 64, "temperature": 1.0,
                            "system": [{"type": "text", "text": "You are a careful engineer."}],
                            "messages": [{"role": "user", "content": [{"type": "text", "text":
                                                                       "Fix the failing test in utils.py."}]}],
                            "tools": [{"name": TOOL_NAME, "description": TOOL_DESCRIPTION,
                                       "input_schema": TOOL_PARAMETERS}],
                            "metadata": {"user_id": "bench"}}).encode()
RESPONSES_BODY = json.dumps({"model": "gpt-5-codex", "max_output_tokens": 64, "temperature": 1.0,
                             "instructions": "You are a careful engineer.", "store": False,
                             "input": [{"type": "message", "role": "user", "content": [
                                 {"type": "input_text", "text": "Fix the failing test in utils.py."}]}],
                             "tools": [{"type": "function", "name": TOOL_NAME, "description": TOOL_DESCRIPTION,
                                        "parameters": TOOL_PARAMETERS}],
                             "include": ["reasoning.encrypted_content"], "prompt_cache_key": "bench"}).encode()
PROTOCOLS = {"chat": ("/chat/completions", BODY), "messages": ("/messages", MESSAGES_BODY),
             "responses": ("/responses", RESPONSES_BODY)}
"""Harness protocol -> (path under the rollout's /v1 base URL, the request body sent)."""


def pinned(core: int, cmd: list[str], env: dict | None = None, cwd: Path | None = None) -> subprocess.Popen:
    """Start `cmd` pinned to one core when taskset exists."""
    prefix = ["taskset", "-c", str(core)] if _has_taskset() else []
    return subprocess.Popen(prefix + cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _has_taskset() -> bool:
    return subprocess.run(["which", "taskset"], capture_output=True).returncode == 0


async def run_load(urls_keys: Sequence[tuple[str | Sequence[str], str]], clients: int, seconds: float,
                   body: bytes = BODY) -> tuple[list[float], float]:
    """`clients` closed-loop clients for `seconds`, each posting `body`; client i takes target i (cycling), a URL or
    several posted to in turn (one rollout served by several gateways), with its key; returns per-call latencies (ms)
    and wall time."""
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        stop_at = time.perf_counter() + seconds

        async def client(i: int) -> None:
            target, key = urls_keys[i % len(urls_keys)]
            urls = (target,) if isinstance(target, str) else tuple(target)
            headers = {"content-type": "application/json", "authorization": f"Bearer {key}"}
            turn = i
            while time.perf_counter() < stop_at:
                url = urls[turn % len(urls)]
                turn += 1
                started = time.perf_counter()
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"HTTP {response.status} from {url}: {await response.text()}")
                latencies.append((time.perf_counter() - started) * 1000)

        started = time.perf_counter()
        await asyncio.gather(*(client(i) for i in range(clients)))
        return latencies, time.perf_counter() - started


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def summarize(latencies: list[float], wall_s: float) -> dict:
    ordered = sorted(latencies)
    return {"calls": len(ordered), "p50_ms": statistics.median(ordered),
            "p99_ms": ordered[int(0.99 * (len(ordered) - 1))], "calls_per_s": len(ordered) / wall_s}


BENCH_SETTINGS = "max_calls_per_attempt: 1000000000\n"
"""Each benchmark rollout makes far more calls than a harness may (10,000 per attempt by default: a 429 after that)."""


def store_url(store: str, workdir: Path, cleanup: contextlib.ExitStack, servers: dict,
              name: str = "") -> tuple[str, Path]:
    """The gateway's --db URL and --config file for `store` (`name` tells apart the stores of several gateways); for
    `postgres` one server is started for the run (in its own /tmp folder: it runs as nobody when we are root, who
    cannot enter `workdir`), each gateway on a database of its own, stopped by `cleanup`."""
    if store == "postgres":
        if "postgres" not in servers:
            servers["postgres"] = _start_postgres(cleanup)
        config = workdir / f"gateway-postgres{name}.yaml"
        config.write_text(BENCH_SETTINGS)
        return servers["postgres"].create_database("bench"), config
    level = store.removeprefix("sqlite-")
    config = workdir / f"gateway-{level}{name}.yaml"
    config.write_text(f"sqlite_synchronous: {level}\n{BENCH_SETTINGS}")
    return f"sqlite:///{workdir / f'bench-{level}{name}.db'}", config


def _start_postgres(cleanup: contextlib.ExitStack) -> PostgresServer:
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        raise SystemExit("no PostgreSQL server binary (postgres, initdb): install the Debian package postgresql "
                         "or leave postgres out of --stores")
    with_affinity = os.sched_getaffinity(0)
    if _has_taskset():
        os.sched_setaffinity(0, {GATEWAY_CORE})  # the server and every backend it forks inherit this core
    root = Path(tempfile.mkdtemp(prefix="harnessrl-bench-pg-"))
    cleanup.callback(shutil.rmtree, root, ignore_errors=True)
    try:
        server = PostgresServer(root, bin_dir).start()
    finally:
        os.sched_setaffinity(0, with_affinity)
    cleanup.callback(server.stop)
    return server


@dataclass(frozen=True)
class Gateway:
    """One running gateway: its process, its rollouts' (base URL, key), and where its results are filed."""

    store: str  # with +otel when it exports spans
    variant: str
    process: subprocess.Popen
    rollouts: list[tuple[str, str]]


def setup_gateway(store: str, variant: Variant, workdir: Path, cleanup: contextlib.ExitStack, servers: dict,
                  upstream_url: str, rollouts: int, profile: Path | None,
                  otlp_endpoint: str | None = None) -> tuple[subprocess.Popen, list[tuple[str, str]]]:
    """`variant`'s gateway on a fresh `store` and its rollouts' (base URL, key); it exports a span per call to
    `otlp_endpoint` when given (the standard OTEL_* settings), none otherwise (no OTEL_* variable at all)."""
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}, "HARNESSRL_ADMIN_TOKEN": ADMIN_TOKEN}
    if otlp_endpoint is not None:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlp_endpoint
    env, cwd = gateway_env_and_cwd(variant, env)
    tag = f"-{variant.name}{'-otel' if otlp_endpoint else ''}"
    db_url, config = store_url(store, workdir, cleanup, servers, tag)
    cmd = [sys.executable, "-m", "gateway.cli", "serve", "--port", str(port), "--db", db_url, "--config", str(config)]
    if profile is not None:  # py-spy samples the gateway for the whole run (raw collapsed stacks)
        cmd = [str(Path(sys.executable).parent / "py-spy"), "record", "-r", "500", "-f", "raw", "-o",
               str(profile.with_suffix(f".{store}{tag}{profile.suffix}")), "--", *cmd]
    proc = pinned(GATEWAY_CORE, cmd, env, cwd)
    wait_healthy(f"http://127.0.0.1:{port}/health", proc)
    admin = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    admin.post("/v1/admin/models", json={"name": "policy", "base_url": upstream_url}).raise_for_status()
    specs = [{"id": f"bench-{i}", "group_id": "bench"} for i in range(rollouts)]
    created = admin.post("/v1/admin/rollouts", json={"rollouts": specs}).raise_for_status().json()
    return proc, [(c["base_url"], c["api_key"]) for c in created]


def measure_direct(upstream_url: str, clients: int, seconds: float) -> dict:
    """The load sent straight to the upstream (chat: what the engine is sent either way)."""
    return summarize(*asyncio.run(run_load([(upstream_url + "/chat/completions", "unused")], clients, seconds)))


def measure_point(gateway: Gateway, protocol: str, direct: dict, clients: int, seconds: float) -> dict:
    """One client count of one protocol against one gateway, beside `direct` (the same load sent straight to the
    upstream just before)."""
    path, body = PROTOCOLS[protocol]
    cpu_before = cpu_seconds(gateway.process.pid)
    g = summarize(*asyncio.run(run_load([(url + path, key) for url, key in gateway.rollouts], clients, seconds,
                                        body)))
    g["cpu_ms_per_call"] = (cpu_seconds(gateway.process.pid) - cpu_before) * 1000 / g["calls"]
    d = direct
    point = {"store": gateway.store, "variant": gateway.variant, "protocol": protocol, "clients": clients,
             "direct": d, "gateway": g, "added_p50_ms": g["p50_ms"] - d["p50_ms"],
             "added_p99_ms": g["p99_ms"] - d["p99_ms"]}
    print(f"{gateway.store:>13} {gateway.variant:>9} {protocol:>9} {clients:>3} clients | direct p50 "
          f"{d['p50_ms']:.2f} ms p99 {d['p99_ms']:.2f} ms {d['calls_per_s']:.0f}/s | gateway p50 {g['p50_ms']:.2f} ms "
          f"p99 {g['p99_ms']:.2f} ms {g['calls_per_s']:.0f}/s, {g['cpu_ms_per_call']:.3f} CPU ms/call | "
          f"added p50 {point['added_p50_ms']:.2f} ms", flush=True)
    return point


def start_gateways(workdir: Path, cleanup: contextlib.ExitStack, upstream_url: str, args: argparse.Namespace,
                   variants: list[Variant], otlp_endpoint: str | None) -> list[Gateway]:
    """Every (store, telemetry, variant) gateway, started and warmed up (idle ones wait on the same core)."""
    servers: dict = {}
    gateways = []
    for store, telemetry, variant in ((s, t, v) for s in args.stores for t in args.telemetry for v in variants):
        process, rollouts = setup_gateway(store, variant, workdir, cleanup, servers, upstream_url,
                                          max(args.clients), args.profile,
                                          otlp_endpoint if telemetry == "on" else None)
        cleanup.callback(_stop, process)
        for protocol in args.protocols:  # warm up
            path, body = PROTOCOLS[protocol]
            asyncio.run(run_load([(url + path, key) for url, key in rollouts], 8, 1.0, body))
        gateways.append(Gateway(store if telemetry == "off" else f"{store}+otel", variant.name, process, rollouts))
    return gateways


def measure(workdir: Path, upstream_url: str, args: argparse.Namespace, otlp_endpoint: str | None) -> list[dict]:
    """Every gateway started at once, then for each round and client count the stores one after another, each
    protocol after the other, and at each of those points every variant in turn (the order rotated by round): side by
    side, so a change of load on a shared machine hits them alike."""
    with contextlib.ExitStack() as cleanup:
        variants = [tree_variant(), *(commit_variant(commit, cleanup) for commit in args.baseline)]
        gateways = start_gateways(workdir, cleanup, upstream_url, args, variants, otlp_endpoint)
        asyncio.run(run_load([(upstream_url + "/chat/completions", "unused")], 8, 1.0))
        points = []
        for r in range(args.rounds):
            for clients in args.clients:
                for store in dict.fromkeys(g.store for g in gateways):
                    group = [g for g in gateways if g.store == store]
                    group = group[r % len(group):] + group[:r % len(group)]
                    for protocol in args.protocols:
                        direct = measure_direct(upstream_url, clients, args.seconds)
                        points.extend({**measure_point(g, protocol, direct, clients, args.seconds), "round": r}
                                      for g in group)
        return points


def translation_cpu_us(repeats: int = 2000) -> dict[str, float]:
    """In-process, median µs of what the gateway computes per call besides forwarding, for each protocol: chat's
    parse and upstream body; a translated protocol's parse, translation, upstream body and, for the scripted upstream's
    answer, the harness's answer. The share of the end-to-end difference that is the translation's own CPU."""
    from gateway.routes.harness import TRANSLATED  # the adapters as served

    answer = chat_answer(Script())
    adapters = {"messages": TRANSLATED[("v1", "messages")], "responses": TRANSLATED[("v1", "responses")]}

    def chat_once() -> None:
        upstream_request(parse_request(BODY, CHAT), CHAT, RolloutMode.TRAIN, "policy")

    def translated_once(protocol: str) -> None:
        adapter = adapters[protocol]
        request = adapter.parse(PROTOCOLS[protocol][1])
        call = prepare(adapter, request, adapter.to_chat(request, []), rollout_id="bench", attempt=0, seq=1,
                       mode=RolloutMode.TRAIN, served_name="policy")
        orjson.dumps(adapter.from_chat(answer, request, call.response_id))

    def median_us(fn) -> float:
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            fn()
            times.append((time.perf_counter() - started) * 1e6)
        return statistics.median(times)

    figures = {protocol: median_us(chat_once if protocol == "chat" else lambda p=protocol: translated_once(p))
               for protocol in PROTOCOLS if protocol == "chat" or protocol in adapters}
    print("in-process CPU per call: " + ", ".join(f"{p} {us:.1f} µs" for p, us in figures.items()), flush=True)
    return figures


def translation_overhead(results: list[dict]) -> list[dict]:
    """Per gateway, client count and round: each translated protocol's gateway p50 minus chat's at the same point."""
    def key(r: dict) -> tuple:
        return r["store"], r["variant"], r["clients"], r["round"]

    chat = {key(r): r["gateway"]["p50_ms"] for r in results if r["protocol"] == "chat"}
    rows = [{"store": r["store"], "variant": r["variant"], "protocol": r["protocol"], "clients": r["clients"],
             "round": r["round"], "added_p50_ms_over_chat": r["gateway"]["p50_ms"] - chat[key(r)]}
            for r in results if r["protocol"] != "chat" and key(r) in chat]
    for row in rows:
        print(f"{row['store']:>13} {row['variant']:>9} {row['protocol']:>9} {row['clients']:>3} clients round "
              f"{row['round']} | p50 over chat {row['added_p50_ms_over_chat']:+.3f} ms", flush=True)
    return rows


def _stop(gateway: subprocess.Popen) -> None:
    gateway.send_signal(signal.SIGINT)
    gateway.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--stores", nargs="+", choices=STORES, default=list(STORES))
    parser.add_argument("--protocols", nargs="+", choices=list(PROTOCOLS), default=list(PROTOCOLS),
                        help="harness protocols measured through the gateway (chat is the baseline of the others)")
    parser.add_argument("--rounds", type=int, default=1, help="repeat every point, interleaved, this many times")
    parser.add_argument("--baseline", nargs="*", default=[], metavar="COMMIT",
                        help="also run these commits' gateways (git worktrees), interleaved point by point")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--profile", type=Path, default=None, help="py-spy the gateway into this file (per store)")
    parser.add_argument("--telemetry", nargs="+", choices=["off", "on"], default=["off"],
                        help="OpenTelemetry export off (no OTEL_* variable) and/or on (a span per call to an OTLP "
                             "receiver in this process); each store's gateway once per setting, labelled +otel")
    args = parser.parse_args()
    load_before = os.getloadavg()
    print(f"load average before: {load_before}", flush=True)
    receiver = OtlpReceiver().start() if "on" in args.telemetry else None
    up_port = free_port()
    upstream = pinned(LOAD_CORE, [sys.executable, "-m", "gateway.scripted", "--port", str(up_port)])
    upstream_url = f"http://127.0.0.1:{up_port}/v1"
    wait_healthy(upstream_url + "/models", upstream)
    if _has_taskset():
        os.sched_setaffinity(0, {LOAD_CORE})
    with tempfile.TemporaryDirectory() as tmp:
        try:
            results = measure(Path(tmp), upstream_url, args, receiver and receiver.endpoint)
        finally:
            upstream.terminate()
            if receiver is not None:
                receiver.stop()
    summary = summarize_variants(results)
    print_summary(summary)
    report = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
              "load_average_before": load_before,
              "load_average_after": os.getloadavg(), "gateway_core": GATEWAY_CORE if _has_taskset() else None,
              "baselines": args.baseline, "results": results, "summary": summary,
              "translation": translation_overhead(results), "translation_cpu_us": translation_cpu_us()}
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
