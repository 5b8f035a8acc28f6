"""The gateway benchmarks' closed-loop load (benchmarks/gateway_overhead.py `run_load`, shared by multi_gateway.py):
each client posts with its rollout's key, cycling through the rollout's URLs when it has several."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from aiohttp import web

from benchmarks.gateway_overhead import run_load


def test_clients_post_with_their_key_and_cycle_through_their_urls() -> None:
    seen: Counter = Counter()

    async def handle(request: web.Request) -> web.Response:
        seen[(request.path, request.headers["authorization"])] += 1
        return web.json_response({})

    async def scenario() -> tuple[list[float], float]:
        app = web.Application()
        app.router.add_post("/{name}", handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        base = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        try:
            return await run_load([([base + "/a", base + "/b"], "k1"), (base + "/c", "k2")], 2, 0.3)
        finally:
            await runner.cleanup()

    latencies, wall_s = asyncio.run(scenario())
    assert len(latencies) == sum(seen.values()) and wall_s >= 0.3
    assert set(seen) == {("/a", "Bearer k1"), ("/b", "Bearer k1"), ("/c", "Bearer k2")}
    assert abs(seen[("/a", "Bearer k1")] - seen[("/b", "Bearer k1")]) <= 1  # in turn


def test_a_refused_call_stops_the_load_naming_the_status() -> None:
    async def scenario() -> None:
        app = web.Application()
        app.router.add_post("/x", lambda request: web.Response(status=503, text="paused"))
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        try:
            await run_load([(f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/x", "k")], 1, 0.2)
        finally:
            await runner.cleanup()

    with pytest.raises(RuntimeError, match="HTTP 503.*paused"):
        asyncio.run(scenario())
