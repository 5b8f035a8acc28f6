"""The sandbox's start-up cost: per command (as root, and nested inside a harness's sandbox) and per harness.

Usage: sudo .venv/bin/python benchmarks/sandbox_startup.py [--repeat 30]
Per command: `true` and `python -c pass` through `sandbox.run_command` against plain `subprocess.run`. Nested: the
same from inside a sandbox (how the SWE harness runs its agent's commands). Per harness: a LocalRunner attempt of
`python -c pass` (the sandbox, the in-sandbox gateway relay, the forwarder) from start to the poll that sees it end,
against a plain subprocess; and one small HTTP request through the gateway route against one sent directly.
Prints a markdown table of medians and p90s in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from controller.runners.base import RunSpec
from controller.runners.local import LocalRunner
from sandbox import GatewayRoute, Limits, Network, SandboxSpec, grant, run_command
from sandbox.forwarder import GatewayForwarder
from sandbox.paths import interpreter_paths, sandbox_package_dir

UID = 64999
NESTED = """
import json, os, subprocess, sys, time
from pathlib import Path
from sandbox import SandboxSpec, run_command
from sandbox.paths import interpreter_paths
spec = SandboxSpec(writable=Path.cwd(), uid=os.getuid(), gid=os.getgid(), readonly=interpreter_paths())
out = {}
for name, argv in (("true", ["true"]), ("python", [sys.executable, "-c", "pass"])):
    plain, boxed = [], []
    for _ in range(int(sys.argv[1])):
        t = time.perf_counter(); subprocess.run(argv, check=True); plain.append(time.perf_counter() - t)
        t = time.perf_counter(); run_command(spec, argv, 60); boxed.append(time.perf_counter() - t)
    out[name] = [plain, boxed]
print(json.dumps(out))
"""


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    """Wall-clock seconds of `repeat` calls (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return times


def row(what: str, plain: list[float], boxed: list[float]) -> str:
    """A table row: medians and p90s in ms, and the median added."""
    def ms(values: list[float], q: float) -> float:
        return 1000 * statistics.quantiles(values, n=10)[8] if q == 0.9 else 1000 * statistics.median(values)
    return (f"| {what} | {ms(plain, 0.5):.1f} | {ms(boxed, 0.5):.1f} | {ms(boxed, 0.9):.1f} | "
            f"{ms(boxed, 0.5) - ms(plain, 0.5):.1f} |")


def spec_for(workdir: Path, **kwargs) -> SandboxSpec:
    grant(workdir, UID, UID)
    return SandboxSpec(writable=workdir, readonly=interpreter_paths(), uid=UID, gid=UID, limits=Limits(), **kwargs)


def per_command(workdir: Path, repeat: int) -> list[str]:
    spec = spec_for(workdir)
    rows = []
    for name, argv in (("command `true`", ["true"]), ("command `python -c pass`", [sys.executable, "-c", "pass"])):
        plain = timed(lambda argv=argv: subprocess.run(argv, check=True), repeat)
        boxed = timed(lambda argv=argv: run_command(spec, argv, 60), repeat)
        rows.append(row(name, plain, boxed))
    return rows


def nested(workdir: Path, repeat: int) -> list[str]:
    spec = spec_for(workdir)
    spec = SandboxSpec(**{**spec.__dict__, "readonly": (*spec.readonly, sandbox_package_dir()),
                          "env": {"PYTHONPATH": str(sandbox_package_dir().parent)}})
    result = run_command(spec, [sys.executable, "-c", NESTED, str(repeat)], 600)
    data = json.loads(result.output.splitlines()[-1])
    return [row(f"nested command `{name}` (inside a harness sandbox)", *data[name]) for name in ("true", "python")]


class Echo(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def per_harness(workdir: Path, repeat: int, port: int) -> list[str]:
    runner = LocalRunner(1)
    counter = iter(range(10**6))

    def attempt() -> None:
        rollout = f"b{next(counter)}"
        work = workdir / rollout
        work.mkdir()
        runner.start(RunSpec(rollout_id=rollout, attempt=1, command=(sys.executable, "-c", "pass"),
                             base_url=f"http://127.0.0.1:{port}/r/{rollout}/v1", api_key="k", task={}, workdir=work,
                             timeout_s=60, stdout_path=work / "out", stderr_path=work / "err"))
        while not runner.poll():
            time.sleep(0.001)
        runner.release(rollout)

    plain = timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), repeat)
    return [row("harness `python -c pass` (LocalRunner: sandbox, relay, forwarder)", plain, timed(attempt, repeat))]


def per_request(workdir: Path, repeat: int, port: int) -> list[str]:
    client = ("import sys, time, urllib.request, json\nurl = sys.argv[1]\nout = []\n"
              "for _ in range(int(sys.argv[2]) + 1):\n    t = time.perf_counter()\n"
              "    urllib.request.urlopen(urllib.request.Request(url, data=b'{}', method='POST')).read()\n"
              "    out.append(time.perf_counter() - t)\nprint(json.dumps(out[1:]))")
    sock = workdir / "fw.sock"
    with GatewayForwarder(sock, "127.0.0.1", port, "bench"):
        route = GatewayRoute(socket=sock, python=Path(sys.executable))
        spec = spec_for(workdir / "req", network=Network.GATEWAY, gateway=route)
        inside = run_command(spec, [sys.executable, "-c", client, "http://127.0.0.1:18080/r/bench/v1/x", str(repeat)],
                             600)
    direct = subprocess.run([sys.executable, "-c", client, f"http://127.0.0.1:{port}/r/bench/v1/x", str(repeat)],
                            capture_output=True, text=True, check=True)
    return [row("one HTTP request through the gateway route", json.loads(direct.stdout),
                json.loads(inside.output.splitlines()[-1]))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    with tempfile.TemporaryDirectory(prefix="harnessrl-bench-sandbox-") as scratch:
        root = Path(scratch)
        for name in ("cmd", "nested", "harness", "req"):
            (root / name).mkdir()
        rows = [*per_command(root / "cmd", args.repeat), *nested(root / "nested", args.repeat),
                *per_harness(root / "harness", args.repeat, port), *per_request(root, args.repeat, port)]
    print(f"| what ({args.repeat} runs) | plain median ms | sandboxed median ms | sandboxed p90 ms | added ms |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    server.shutdown()


if __name__ == "__main__":
    main()
