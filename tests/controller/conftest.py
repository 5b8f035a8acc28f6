"""Fixtures for controller tests: a scripted upstream and a gateway in front of it, both served in-process."""

from __future__ import annotations

import pytest

from gateway.client import GatewayClient
from gateway.scripted import Script
from tests.gateway.support import ADMIN_TOKEN, GRADER_TOKEN, free_port
from tests.inprocess import InProcessGateway, InProcessScripted


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    upstream = InProcessScripted(Script(prompt_tokens=8, response_tokens=4)).start()
    gw = InProcessGateway(tmp_path_factory.mktemp("gw") / "store.db").start()
    with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
        admin.register_model("policy", upstream.base_url, version=1)
        admin.register_model("dead", f"http://127.0.0.1:{free_port()}/v1", version=1)
    yield gw
    gw.stop()
    upstream.stop()


@pytest.fixture
def admin(gateway):
    with GatewayClient(gateway.url, ADMIN_TOKEN) as client:
        yield client


@pytest.fixture
def grader(gateway):
    with GatewayClient(gateway.url, GRADER_TOKEN) as client:
        yield client
