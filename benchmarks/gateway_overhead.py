"""Gateway overhead: added latency (p50/p99) and throughput versus calling the upstream directly.

The upstream is `gateway.scripted` (instant answers in vLLM's shapes: 512 prompt token IDs, 64 response token IDs with
logprobs). The gateway runs as its real server process on a fresh SQLite store, pinned to one core (taskset); the
upstream and the load generator share the other core. Every call through the gateway is durably committed before
its reply. Run: `.venv/bin/python benchmarks/gateway_overhead.py [--seconds 5] [--json out.json]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.gateway.support import ADMIN_TOKEN, free_port, wait_healthy  # noqa: E402

BODY = json.dumps({"model": "policy", "messages": [{"role": "user", "content": "Fix the failing test in utils.py."}],
                   "max_tokens": 64, "temperature": 1.0}).encode()


def pinned(core: int, cmd: list[str], env: dict | None = None) -> subprocess.Popen:
    """Start `cmd` pinned to one core when taskset exists."""
    prefix = ["taskset", "-c", str(core)] if _has_taskset() else []
    return subprocess.Popen(prefix + cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _has_taskset() -> bool:
    return subprocess.run(["which", "taskset"], capture_output=True).returncode == 0


async def run_load(urls_keys: list[tuple[str, str]], clients: int, seconds: float) -> tuple[list[float], float]:
    """`clients` closed-loop clients for `seconds`; returns per-call latencies (ms) and wall time."""
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        stop_at = time.perf_counter() + seconds

        async def client(i: int) -> None:
            url, key = urls_keys[i % len(urls_keys)]
            headers = {"content-type": "application/json", "authorization": f"Bearer {key}"}
            while time.perf_counter() < stop_at:
                started = time.perf_counter()
                async with session.post(url, data=BODY, headers=headers) as response:
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


def setup_gateway(workdir: Path, upstream_url: str, rollouts: int,
                  profile: Path | None) -> tuple[subprocess.Popen, list[tuple[str, str]]]:
    port = free_port()
    env = {**os.environ, "HARNESSRL_ADMIN_TOKEN": ADMIN_TOKEN}
    cmd = [sys.executable, "-m", "gateway.cli", "serve", "--port", str(port),
           "--db", f"sqlite:///{workdir / 'bench.db'}"]
    if profile is not None:  # py-spy samples the gateway for the whole run (raw collapsed stacks)
        cmd = [str(Path(sys.executable).parent / "py-spy"), "record", "-r", "500", "-f", "raw", "-o", str(profile),
               "--", *cmd]
    proc = pinned(0, cmd, env)
    wait_healthy(f"http://127.0.0.1:{port}/health", proc)
    admin = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    admin.post("/v1/admin/models", json={"name": "policy", "base_url": upstream_url}).raise_for_status()
    specs = [{"id": f"bench-{i}", "group_id": "bench"} for i in range(rollouts)]
    created = admin.post("/v1/admin/rollouts", json={"rollouts": specs}).raise_for_status().json()
    return proc, [(c["base_url"] + "/chat/completions", c["api_key"]) for c in created]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--profile", type=Path, default=None, help="py-spy the gateway into this file")
    args = parser.parse_args()
    up_port = free_port()
    upstream = pinned(1, [sys.executable, "-m", "gateway.scripted", "--port", str(up_port)])
    upstream_url = f"http://127.0.0.1:{up_port}/v1"
    wait_healthy(upstream_url + "/models", upstream)
    with tempfile.TemporaryDirectory() as tmp:
        gateway, routes = setup_gateway(Path(tmp), upstream_url, max(args.clients), args.profile)
        if _has_taskset():
            os.sched_setaffinity(0, {1})
        direct = [(upstream_url + "/chat/completions", "unused")]
        results = []
        try:
            asyncio.run(run_load(routes, 8, 1.0))  # warm up both paths
            asyncio.run(run_load(direct, 8, 1.0))
            for clients in args.clients:
                d = summarize(*asyncio.run(run_load(direct, clients, args.seconds)))
                cpu_before = cpu_seconds(gateway.pid)
                g = summarize(*asyncio.run(run_load(routes, clients, args.seconds)))
                g["cpu_ms_per_call"] = (cpu_seconds(gateway.pid) - cpu_before) * 1000 / g["calls"]
                results.append({"clients": clients, "direct": d, "gateway": g,
                                "added_p50_ms": g["p50_ms"] - d["p50_ms"], "added_p99_ms": g["p99_ms"] - d["p99_ms"]})
                print(f"{clients:>3} clients | direct p50 {d['p50_ms']:.2f} ms p99 {d['p99_ms']:.2f} ms "
                      f"{d['calls_per_s']:.0f}/s | gateway p50 {g['p50_ms']:.2f} ms p99 {g['p99_ms']:.2f} ms "
                      f"{g['calls_per_s']:.0f}/s, {g['cpu_ms_per_call']:.3f} CPU ms/call | "
                      f"added p50 {results[-1]['added_p50_ms']:.2f} ms", flush=True)
        finally:
            gateway.send_signal(signal.SIGINT)
            upstream.terminate()
            gateway.wait(timeout=60)
    report = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
              "gateway_core": 0 if _has_taskset() else None, "results": results}
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
