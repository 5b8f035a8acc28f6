"""Fixtures for gateway tests: a scripted upstream and a real gateway process in front of it."""

from __future__ import annotations

import pytest

from gateway.client import GatewayClient
from tests.gateway.support import ADMIN_TOKEN, GatewayProcess, ScriptedProcess


@pytest.fixture(scope="module")
def scripted():
    upstream = ScriptedProcess(["--prompt-tokens", "16", "--response-tokens", "8"]).start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, scripted):
    gw = GatewayProcess(tmp_path_factory.mktemp("gw") / "store.db").start()
    with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
        admin.register_model("policy", scripted.base_url, version=3)
    yield gw
    gw.stop()


@pytest.fixture
def admin(gateway):
    with GatewayClient(gateway.url, ADMIN_TOKEN) as client:
        yield client
