"""The served gateway settles its garbage collector once the app is built (gateway/heap.py, gateway/cli.py)."""

from __future__ import annotations

import gc

import pytest
import uvicorn

from gateway import cli, heap


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
    monkeypatch.setattr(uvicorn, "run", lambda app, **_: events.append(type(app).__name__))
    cli.serve(host=None, port=None, db=f"sqlite:///{tmp_path / 'store.db'}", config=None, public_url=None)
    assert events == ["settle", "GatewayApp"]
