"""Fixtures for gateway tests: a scripted upstream and a gateway in front of it, both served in-process."""

from __future__ import annotations

import pytest

from gateway.client import GatewayClient
from gateway.scripted import Script
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway, InProcessScripted


@pytest.fixture(scope="module")
def scripted():
    upstream = InProcessScripted(Script(prompt_tokens=16, response_tokens=8)).start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, scripted):
    gw = InProcessGateway(tmp_path_factory.mktemp("gw") / "store.db").start()
    with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
        admin.register_model("policy", scripted.base_url, version=3)
    yield gw
    gw.stop()


@pytest.fixture
def admin(gateway):
    with GatewayClient(gateway.url, ADMIN_TOKEN) as client:
        yield client
