"""Failures the gateway cannot prevent are still answered OpenAI-shaped (issue 12, point 5): a full database is a 503
with Retry-After that names the database's words; a bug of the gateway's own is a JSON 500 with code internal_error
(never a plain-text 500). Through the ASGI app in-process."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.config import GatewayConfig
from tests.gateway.api_support import error_of
from tests.gateway.support import ADMIN_TOKEN

ADMIN = {"authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture
def served(tmp_path):
    app = create_app(GatewayConfig(db_url=f"sqlite:///{tmp_path / 'store.db'}", admin_token=ADMIN_TOKEN))
    with TestClient(app, base_url="http://gateway", raise_server_exceptions=False) as client:
        yield app, client


def test_a_full_database_is_503_with_retry_after(served) -> None:
    app, client = served
    writer = app.context.store._committer._conn.connection.driver_connection  # the only write connection
    pages = writer.execute("PRAGMA page_count").fetchone()[0]
    writer.execute(f"PRAGMA max_page_count={pages + 1}")  # as if the disk were full
    big = {"rollouts": [{"id": "big", "group_id": "g", "input": {"blob": "x" * 200_000}}]}
    error = error_of(response := client.post("/v1/admin/rollouts", json=big, headers=ADMIN), 503)
    assert error["code"] == "store_unavailable" and "nothing was written" in error["message"]
    assert response.headers["retry-after"] == "1" and client.get("/health").status_code == 200
    writer.execute("PRAGMA max_page_count=1073741823")  # space again: the same writer works on
    assert client.post("/v1/admin/rollouts", json=big, headers=ADMIN).status_code == 200
    assert client.get("/v1/admin/rollouts/big", headers=ADMIN).json()["input"]["blob"] == "x" * 200_000


@pytest.mark.parametrize("path", ["/v1/admin/models", "/r/some-rollout/v1/chat/completions"])
def test_a_bug_is_an_openai_shaped_500_not_plain_text(served, path: str) -> None:
    app, client = served

    async def bug(*_args, **_kwargs):
        raise RuntimeError("a bug")

    app.context.store.list_models = bug
    app.context.store.brief = bug
    method = "GET" if path.endswith("models") else "POST"
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    response = client.request(method, path, headers=ADMIN, json=body if method == "POST" else None)
    error = error_of(response, 500)
    assert error["code"] == "internal_error" and "RuntimeError" in error["message"]
