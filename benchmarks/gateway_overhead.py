"""Gateway overhead: added latency (p50/p99) and throughput versus calling the upstream directly, per store.

The upstream is `gateway.scripted` (instant answers in vLLM's shapes: 512 prompt token IDs, 64 response token IDs with
logprobs). The gateway runs as its real server process on a fresh store, pinned to one core (taskset); the upstream
and the load generator share the other core. Every call through the gateway is durably committed before its reply.
One invocation measures each store side by side: SQLite with synchronous=FULL, SQLite with synchronous=NORMAL, and a
real PostgreSQL server (fsync and synchronous commits on, pinned to the gateway's core: everything that makes a call
durable shares that core, as with SQLite). Each harness protocol in `--protocols` is measured through the same
gateway: `chat` (passed through byte for byte), `messages` (Anthropic Messages) and `responses` (OpenAI Responses),
both translated to chat completions and back; the difference of their p50 at the same point is the translation's
overhead. Run:
`.venv/bin/python benchmarks/gateway_overhead.py [--seconds 5] [--stores sqlite-FULL sqlite-NORMAL postgres]
[--protocols chat messages responses] [--telemetry off on] [--rounds 1] [--json out.json]`; the stores' gateways
run at once and each point is measured store after store, protocol after protocol. With `--telemetry off on` each
store's gateway runs twice, without any OTEL_* variable and exporting a span per call over OTLP/HTTP (`+otel`).
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
from pathlib import Path

import aiohttp
import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

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

BODY = json.dumps({"model": "policy", "messages": [{"role": "user", "content": "Fix the failing test in utils.py."}],
                   "max_tokens": 64, "temperature": 1.0}).encode()
MESSAGES_BODY = json.dumps({"model": "claude-opus-5-5", "max_tokens": 64, "temperature": 1.0,
                            "system": [{"type": "text", "text": "You are a careful engineer."}],
                            "messages": [{"role": "user", "content": [{"type": "text", "text":
                                                                       "Fix the failing test in utils.py."}]}],
                            "tools": [{"name": "Bash", "description": "Run a shell command", "input_schema": {
                                "type": "object", "properties": {"command": {"type": "string"}},
                                "required": ["command"]}}],
                            "metadata": {"user_id": "bench"}}).encode()
RESPONSES_BODY = json.dumps({"model": "gpt-5-codex", "max_output_tokens": 64, "temperature": 1.0,
                             "instructions": "You are a careful engineer.", "store": False,
                             "input": [{"type": "message", "role": "user", "content": [
                                 {"type": "input_text", "text": "Fix the failing test in utils.py."}]}],
                             "tools": [{"type": "function", "name": "exec_command", "description": "Run a command",
                                        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}},
                                                       "required": ["cmd"]}}],
                             "include": ["reasoning.encrypted_content"], "prompt_cache_key": "bench"}).encode()
PROTOCOLS = {"chat": ("/chat/completions", BODY), "messages": ("/messages", MESSAGES_BODY),
             "responses": ("/responses", RESPONSES_BODY)}
"""Harness protocol -> (path under the rollout's /v1 base URL, the request body sent)."""


def pinned(core: int, cmd: list[str], env: dict | None = None) -> subprocess.Popen:
    """Start `cmd` pinned to one core when taskset exists."""
    prefix = ["taskset", "-c", str(core)] if _has_taskset() else []
    return subprocess.Popen(prefix + cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _has_taskset() -> bool:
    return subprocess.run(["which", "taskset"], capture_output=True).returncode == 0


async def run_load(urls_keys: list[tuple[str, str]], clients: int, seconds: float,
                   body: bytes = BODY) -> tuple[list[float], float]:
    """`clients` closed-loop clients for `seconds`, each posting `body`; returns per-call latencies (ms) and wall
    time."""
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        stop_at = time.perf_counter() + seconds

        async def client(i: int) -> None:
            url, key = urls_keys[i % len(urls_keys)]
            headers = {"content-type": "application/json", "authorization": f"Bearer {key}"}
            while time.perf_counter() < stop_at:
                started = time.perf_counter()
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"HTTP {response.status} from {url}")
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


def store_url(store: str, workdir: Path, cleanup: contextlib.ExitStack) -> tuple[str, Path]:
    """The gateway's --db URL and --config file for `store`; for `postgres` a server is started (in its own /tmp
    folder: it runs as nobody when we are root, who cannot enter `workdir`), stopped by `cleanup`."""
    if store == "postgres":
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
        config = workdir / "gateway-postgres.yaml"
        config.write_text(BENCH_SETTINGS)
        return server.create_database("bench"), config
    level = store.removeprefix("sqlite-")
    config = workdir / f"gateway-{level}.yaml"
    config.write_text(f"sqlite_synchronous: {level}\n{BENCH_SETTINGS}")
    return f"sqlite:///{workdir / f'bench-{level}.db'}", config


def setup_gateway(store: str, workdir: Path, cleanup: contextlib.ExitStack, upstream_url: str, rollouts: int,
                  profile: Path | None,
                  otlp_endpoint: str | None = None) -> tuple[subprocess.Popen, list[tuple[str, str]]]:
    """The store's gateway process and its rollouts' (base URL, key); it exports a span per call to `otlp_endpoint`
    when given (the standard OTEL_* settings), none otherwise (no OTEL_* variable at all)."""
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}, "HARNESSRL_ADMIN_TOKEN": ADMIN_TOKEN}
    if otlp_endpoint is not None:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlp_endpoint
    db_url, config = store_url(store, workdir, cleanup)
    cmd = [sys.executable, "-m", "gateway.cli", "serve", "--port", str(port), "--db", db_url, "--config", str(config)]
    if profile is not None:  # py-spy samples the gateway for the whole run (raw collapsed stacks)
        cmd = [str(Path(sys.executable).parent / "py-spy"), "record", "-r", "500", "-f", "raw", "-o",
               str(profile.with_suffix(f".{store}{profile.suffix}")), "--", *cmd]
    proc = pinned(GATEWAY_CORE, cmd, env)
    wait_healthy(f"http://127.0.0.1:{port}/health", proc)
    admin = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    admin.post("/v1/admin/models", json={"name": "policy", "base_url": upstream_url}).raise_for_status()
    specs = [{"id": f"bench-{i}", "group_id": "bench"} for i in range(rollouts)]
    created = admin.post("/v1/admin/rollouts", json={"rollouts": specs}).raise_for_status().json()
    return proc, [(c["base_url"], c["api_key"]) for c in created]


def measure_point(store: str, protocol: str, gateway: subprocess.Popen, rollouts: list[tuple[str, str]],
                  upstream_url: str, clients: int, seconds: float) -> dict:
    """One client count of one protocol against one store's gateway, beside a direct run of the same load (chat,
    what the engine is sent either way) just before it."""
    d = summarize(*asyncio.run(run_load([(upstream_url + "/chat/completions", "unused")], clients, seconds)))
    path, body = PROTOCOLS[protocol]
    cpu_before = cpu_seconds(gateway.pid)
    g = summarize(*asyncio.run(run_load([(url + path, key) for url, key in rollouts], clients, seconds, body)))
    g["cpu_ms_per_call"] = (cpu_seconds(gateway.pid) - cpu_before) * 1000 / g["calls"]
    point = {"store": store, "protocol": protocol, "clients": clients, "direct": d, "gateway": g,
             "added_p50_ms": g["p50_ms"] - d["p50_ms"], "added_p99_ms": g["p99_ms"] - d["p99_ms"]}
    print(f"{store:>13} {protocol:>8} {clients:>3} clients | direct p50 {d['p50_ms']:.2f} ms p99 {d['p99_ms']:.2f} ms "
          f"{d['calls_per_s']:.0f}/s | gateway p50 {g['p50_ms']:.2f} ms p99 {g['p99_ms']:.2f} ms "
          f"{g['calls_per_s']:.0f}/s, {g['cpu_ms_per_call']:.3f} CPU ms/call | "
          f"added p50 {point['added_p50_ms']:.2f} ms", flush=True)
    return point


def measure(workdir: Path, upstream_url: str, args: argparse.Namespace, otlp_endpoint: str | None) -> list[dict]:
    """Every store's gateway started at once (idle ones wait on the same core), then for each round and client count
    the stores one after another, each protocol after the other: side by side, so a change of load on a shared
    machine hits them alike."""
    with contextlib.ExitStack() as cleanup:
        gateways = {}
        for store, telemetry in ((s, t) for s in args.stores for t in args.telemetry):
            gateway, rollouts = setup_gateway(store, workdir, cleanup, upstream_url, max(args.clients), args.profile,
                                              otlp_endpoint if telemetry == "on" else None)
            store = store if telemetry == "off" else f"{store}+otel"
            cleanup.callback(_stop, gateway)
            for protocol in args.protocols:  # warm up
                path, body = PROTOCOLS[protocol]
                asyncio.run(run_load([(url + path, key) for url, key in rollouts], 8, 1.0, body))
            gateways[store] = (gateway, rollouts)
        asyncio.run(run_load([(upstream_url + "/chat/completions", "unused")], 8, 1.0))
        return [{**measure_point(store, protocol, gateway, rollouts, upstream_url, clients, args.seconds), "round": r}
                for r in range(args.rounds) for clients in args.clients
                for store, (gateway, rollouts) in gateways.items() for protocol in args.protocols]


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
    """Per store, client count and round: each translated protocol's gateway p50 minus chat's at the same point."""
    chat = {(r["store"], r["clients"], r["round"]): r["gateway"]["p50_ms"] for r in results if r["protocol"] == "chat"}
    rows = [{"store": r["store"], "protocol": r["protocol"], "clients": r["clients"], "round": r["round"],
             "added_p50_ms_over_chat": r["gateway"]["p50_ms"] - chat[(r["store"], r["clients"], r["round"])]}
            for r in results if r["protocol"] != "chat" and (r["store"], r["clients"], r["round"]) in chat]
    for row in rows:
        print(f"{row['store']:>13} {row['protocol']:>8} {row['clients']:>3} clients round {row['round']} | "
              f"p50 over chat {row['added_p50_ms_over_chat']:+.3f} ms", flush=True)
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
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--profile", type=Path, default=None, help="py-spy the gateway into this file (per store)")
    parser.add_argument("--telemetry", nargs="+", choices=["off", "on"], default=["off"],
                        help="OpenTelemetry export off (no OTEL_* variable) and/or on (a span per call to an OTLP "
                             "receiver in this process); each store's gateway once per setting, labelled +otel")
    args = parser.parse_args()
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
    report = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
              "gateway_core": GATEWAY_CORE if _has_taskset() else None, "results": results,
              "translation": translation_overhead(results), "translation_cpu_us": translation_cpu_us()}
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
