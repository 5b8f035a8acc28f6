"""Several gateways on one PostgreSQL store: calls/s of two gateway processes against one, on the same store.

Three set-ups, each on a fresh database of one PostgreSQL server (fsync and synchronous commits on), measured one after
the other at each client count, every call durably recorded before its answer:
- `one`: one gateway alone on the store (it numbers calls in memory: the single-gateway hot path);
- `one-shared`: one gateway that numbers calls in the store, as it does once another gateway joined (one joined and
  left before the measurement): the price of the store's numbering alone;
- `two`: two gateways on one store; every client's calls alternate between them (a Service without stickiness), so
  each rollout's calls are spread over both.
The upstream is `gateway.scripted` (instant answers in vLLM's shapes, as in `gateway_overhead.py`). Reported per point:
calls/s, p50 and p99, CPU per call of the gateways (summed) and of PostgreSQL (the server and its backends), and the
machine's load average. `--pin same` (default on fewer than 4 cores) puts every gateway and PostgreSQL on core 0 and
the load and upstream on core 1: two gateways then share one core, which measures what coordinating costs, not how
far two scale; `--pin spread` gives each gateway a core of its own (core i), PostgreSQL the next, the load and upstream
the rest. Run: `.venv/bin/python benchmarks/multi_gateway.py [--seconds 5] [--clients 16 64] [--pin same|spread]
[--json out.json]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.gateway_overhead import (  # noqa: E402
    BENCH_SETTINGS,
    _has_taskset,
    cpu_seconds,
    run_load,
    summarize,
)
from tests.gateway.support import ADMIN_TOKEN, free_port, wait_healthy  # noqa: E402
from tests.services import PostgresServer, postgres_bin_dir  # noqa: E402

SETUPS = ("one", "one-shared", "two")


@dataclass(frozen=True)
class Cores:
    """Where each process runs (None: anywhere)."""

    gateways: list[int] | None
    postgres: int | None
    load: set[int] | None


def cores_for(pin: str) -> Cores:
    count = os.cpu_count() or 1
    if not _has_taskset() or count < 2:
        return Cores(None, None, None)
    if pin == "spread":
        if count < 4:
            raise SystemExit(f"--pin spread needs 4 cores (two gateways, PostgreSQL, the load), not {count}")
        return Cores([0, 1], 2, set(range(3, count)))
    return Cores([0, 0], 0, set(range(1, count)))


def start(cmd: list[str], core: int | None, env: dict | None = None) -> subprocess.Popen:
    prefix = ["taskset", "-c", str(core)] if core is not None else []
    return subprocess.Popen(prefix + cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def start_postgres(cleanup: contextlib.ExitStack, core: int | None) -> PostgresServer:
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        raise SystemExit("no PostgreSQL server binary (postgres, initdb): install the Debian package postgresql")
    affinity = os.sched_getaffinity(0)
    if core is not None:
        os.sched_setaffinity(0, {core})  # the server and every backend it forks inherit this core
    root = Path(tempfile.mkdtemp(prefix="harnessrl-bench-pg-"))
    try:
        server = PostgresServer(root, bin_dir).start()
    finally:
        os.sched_setaffinity(0, affinity)
    cleanup.callback(server.stop)
    return server


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and its live children (PostgreSQL: the postmaster and its backends)."""
    total = cpu_seconds(pid)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def start_gateway(db_url: str, config: Path, core: int | None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}, "HARNESSRL_ADMIN_TOKEN": ADMIN_TOKEN}
    proc = start([sys.executable, "-m", "gateway.cli", "serve", "--port", str(port), "--db", db_url, "--config",
                  str(config)], core, env)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url + "/health", proc)
    return proc, url


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)


def wait_shared(url: str, gateways: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(base_url=url, headers={"authorization": f"Bearer {ADMIN_TOKEN}"}) as admin:
        while True:
            live = [g for g in admin.get("/v1/admin/state").json()["gateways"] if g["live"]]
            if len(live) == gateways and all(g["shared"] for g in live):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"gateways not sharing the store's numbering after {timeout_s} s: {live}")
            time.sleep(0.1)


def chat_targets(rollouts: list[tuple[list[str], str]]) -> list[tuple[list[str], str]]:
    """Each rollout's chat URLs (one per gateway, posted to in turn by `run_load`) with its key."""
    return [([base + "/chat/completions" for base in bases], key) for bases, key in rollouts]


@dataclass
class Setup:
    """A set-up under test: its gateway processes and each rollout's (base URLs, key)."""

    name: str
    processes: list[subprocess.Popen]
    rollouts: list[tuple[list[str], str]]


def setup(name: str, server: PostgresServer, workdir: Path, cores: Cores, upstream_url: str, rollouts: int,
          cleanup: contextlib.ExitStack) -> Setup:
    db_url = server.create_database(f"multi_{name.replace('-', '_')}")
    config = workdir / "gateway.yaml"
    config.write_text(BENCH_SETTINGS)
    def core(i: int) -> int | None:
        return cores.gateways[i] if cores.gateways else None

    first, url = start_gateway(db_url, config, core(0))
    cleanup.callback(stop, first)
    processes, urls = [first], [url]
    if name == "one-shared":  # a second gateway joins (the first numbers in the store from then on) and leaves
        second, second_url = start_gateway(db_url, config, core(1))
        wait_shared(url, 2)
        stop(second)
    elif name == "two":
        second, second_url = start_gateway(db_url, config, core(1))
        cleanup.callback(stop, second)
        wait_shared(url, 2)
        processes.append(second)
        urls.append(second_url)
    admin = httpx.Client(base_url=url, headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    admin.post("/v1/admin/models", json={"name": "policy", "base_url": upstream_url}).raise_for_status()
    specs = [{"id": f"bench-{i}", "group_id": "bench"} for i in range(rollouts)]
    created = admin.post("/v1/admin/rollouts", json={"rollouts": specs}).raise_for_status().json()
    time.sleep(1.5)  # every gateway's router has the model (they read it at their next beat)
    return Setup(name, processes, [([f"{u}/r/{c['id']}/v1" for u in urls], c["api_key"]) for c in created])


def measure(s: Setup, server_pid: int, clients: int, seconds: float) -> dict:
    gateway_cpu = sum(cpu_seconds(p.pid) for p in s.processes)
    pg_cpu = tree_cpu_seconds(server_pid)
    point = summarize(*asyncio.run(run_load(chat_targets(s.rollouts), clients, seconds)))
    gateway_cpu = sum(cpu_seconds(p.pid) for p in s.processes) - gateway_cpu
    point["gateway_cpu_ms_per_call"] = gateway_cpu * 1000 / point["calls"]
    point["postgres_cpu_ms_per_call"] = (tree_cpu_seconds(server_pid) - pg_cpu) * 1000 / point["calls"]
    point.update(setup=s.name, clients=clients, load_average=os.getloadavg()[0])
    print(f"{s.name:>10} {clients:>3} clients | {point['calls_per_s']:.0f} calls/s, p50 {point['p50_ms']:.2f} ms, "
          f"p99 {point['p99_ms']:.2f} ms | CPU per call: gateways {point['gateway_cpu_ms_per_call']:.3f} ms, "
          f"PostgreSQL {point['postgres_cpu_ms_per_call']:.3f} ms | load {point['load_average']:.2f}", flush=True)
    return point


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--setups", nargs="+", choices=SETUPS, default=list(SETUPS))
    parser.add_argument("--rounds", type=int, default=1, help="repeat every point, interleaved, this many times")
    parser.add_argument("--pin", choices=["same", "spread"], default="spread" if (os.cpu_count() or 1) >= 4 else "same")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    cores = cores_for(args.pin)
    load_before = os.getloadavg()
    print(f"load average before: {load_before}; {os.cpu_count()} cores, pin {args.pin}: {cores}", flush=True)
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as cleanup:
        up_port = free_port()
        load_core = min(cores.load) if cores.load else None
        upstream = start([sys.executable, "-m", "gateway.scripted", "--port", str(up_port)], load_core)
        cleanup.callback(upstream.terminate)
        upstream_url = f"http://127.0.0.1:{up_port}/v1"
        wait_healthy(upstream_url + "/models", upstream)
        server = start_postgres(cleanup, cores.postgres)
        setups = [setup(name, server, Path(tmp), cores, upstream_url, max(args.clients), cleanup)
                  for name in args.setups]
        if cores.load:
            os.sched_setaffinity(0, cores.load)
        for s in setups:  # warm up
            asyncio.run(run_load(chat_targets(s.rollouts), 8, 1.0))
        points = [measure(s, server._process.pid, clients, args.seconds) | {"round": r}
                  for r in range(args.rounds) for clients in args.clients for s in setups]
    report = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores", "pin": args.pin,
              "load_average_before": load_before, "load_average_after": os.getloadavg(), "points": points}
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
