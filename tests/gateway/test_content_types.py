"""The admin API against a real gateway: JSON bodies are read whatever their Content-Type (as `curl -d` sends them)."""

from __future__ import annotations

import httpx
import orjson
import pytest

from tests.gateway.api_support import auth, error_of, new_id
from tests.gateway.support import ADMIN_TOKEN

FORM = "application/x-www-form-urlencoded"


def post(gateway_url: str, path: str, body: bytes, content_type: str | None) -> httpx.Response:
    """POST raw bytes with the admin token under `content_type` (none: no Content-Type header at all)."""
    headers = {**auth(ADMIN_TOKEN), **({"content-type": content_type} if content_type else {})}
    return httpx.post(gateway_url + path, content=body, headers=headers, timeout=30)


@pytest.mark.parametrize("content_type", [FORM, "text/plain", None])
def test_a_json_body_is_accepted_whatever_its_content_type(gateway, admin, content_type) -> None:
    rollout_id = new_id("ct")
    spec = {"rollouts": [{"id": rollout_id, "group_id": new_id("g"), "input": {"question": "2+2?"}}]}
    response = post(gateway.url, "/v1/admin/rollouts", orjson.dumps(spec), content_type)
    assert response.status_code == 200, response.text
    assert [created["id"] for created in response.json()] == [rollout_id]
    assert admin.get_rollout(rollout_id).input == {"question": "2+2?"}


def test_a_json_model_registration_sent_as_a_form_is_accepted(gateway, admin, scripted) -> None:
    body = orjson.dumps({"name": "form-policy", "base_url": scripted.base_url})
    assert post(gateway.url, "/v1/admin/models", body, FORM).status_code == 200
    assert "form-policy" in {record.name for record in admin.list_models()}


@pytest.mark.parametrize("body", [b"name=policy&base_url=x", b"{not json", b'"policy"'])
@pytest.mark.parametrize("content_type", [FORM, "application/json"])
def test_a_body_that_is_not_a_json_object_is_the_usual_400(gateway, body, content_type) -> None:
    error = error_of(post(gateway.url, "/v1/admin/models", body, content_type), 400)
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_request")
