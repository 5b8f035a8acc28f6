"""The served gateway settles its garbage collector once the app is built (gateway/heap.py, gateway/cli.py), and
exits with uvicorn's start-up failure status when its server never started."""

from __future__ import annotations

import gc

import pytest
from uvicorn.main import STARTUP_FAILURE

from gateway import cli, heap
from gateway.server import GatewayServer


@pytest.fixture
def restored_collector():
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_settle_freezes_what_is_alive_and_raises_the_thresholds(restored_collector) -> None:
    survivor = [object() for _ in range(10)]
    heap.settle()
    assert gc.get_threshold() == heap.THRESHOLDS and gc.get_freeze_count() > len(survivor)
    assert gc.is_tracked(survivor) and gc.collect() >= 0  # a collection still runs, over what came after


def test_serve_settles_the_heap_after_building_the_app(monkeypatch, tmp_path) -> None:
    events: list[str] = []
    monkeypatch.setenv("HARNESSRL_ADMIN_TOKEN", "admin-t")
    monkeypatch.setattr(heap, "settle", lambda: events.append("settle"))
    def run(server: GatewayServer) -> None:
        events.append(type(server.config.app).__name__)
        server.started = True
    monkeypatch.setattr(GatewayServer, "run", run)
    cli.serve(host=None, port=None, db=f"sqlite:///{tmp_path / 'store.db'}", config=None, public_url=None)
    assert events == ["settle", "GatewayApp"]


def test_serve_that_cannot_start_exits_with_uvicorns_startup_failure(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("HARNESSRL_ADMIN_TOKEN", "admin-t")
    monkeypatch.setattr(GatewayServer, "run", lambda server: None)  # never started (a taken port, say)
    with pytest.raises(SystemExit) as exited:
        cli.serve(host=None, port=None, db=f"sqlite:///{tmp_path / 'store.db'}", config=None, public_url=None)
    assert exited.value.code == STARTUP_FAILURE
