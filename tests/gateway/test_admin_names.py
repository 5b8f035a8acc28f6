"""Names a caller of the admin API chooses and the store keeps as text (a group id, a controller id, a served model
name) carry no control characters: a NUL in one was a bare 500 on PostgreSQL (its text holds no NUL); now it is a
400 naming the field on both stores, and the rest of the admin API keeps working."""

from __future__ import annotations

import httpx
import pytest

from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway

STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.slow)]
HEADERS = {"authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.mark.parametrize("store", STORES)
def test_a_name_with_a_control_character_is_400_naming_it(store, tmp_path, request, scripted) -> None:
    url = (request.getfixturevalue("postgres_server").create_database("admin_names") if store == "postgres"
           else f"sqlite:///{tmp_path / 'store.db'}")
    gateway = InProcessGateway(db_url=url).start()
    try:
        def post(path: str, body: dict) -> httpx.Response:
            return httpx.post(gateway.url + path, json=body, headers=HEADERS, timeout=30)

        assert post("/v1/admin/rollouts", {"rollouts": [{"id": "ok", "group_id": "g"}]}).status_code == 200
        refused = {
            "group_id": post("/v1/admin/rollouts", {"rollouts": [{"id": "a", "group_id": "g\x00"}]}),
            "controller_id": post("/v1/admin/rollouts/claim", {"controller_id": "c\x00", "limit": 1}),
            "served_name": post("/v1/admin/models", {"name": "m", "base_url": scripted.base_url,
                                                     "served_name": "s\x00"}),
            "lease": post("/v1/admin/rollouts/ok/lease", {"controller_id": "c\n", "lease_s": 60}),
        }
        for field, response in refused.items():
            assert response.status_code == 400, (field, response.status_code, response.text)
        for field in ("group_id", "controller_id", "served_name"):
            assert refused[field].json()["error"]["param"].endswith(field), refused[field].text
        (claimed,) = post("/v1/admin/rollouts/claim", {"controller_id": "ctl", "limit": 5}).json()
        assert claimed["id"] == "ok"
        assert post("/v1/admin/models", {"name": "m", "base_url": scripted.base_url,
                                         "served_name": "served/m"}).status_code == 200
    finally:
        gateway.stop()
