"""Rollout artifacts against a real gateway: roundtrip, per-attempt keys, auth matrix, names, size, finished."""

from __future__ import annotations

import httpx
import pytest

from gateway.client import GatewayAPIError
from gateway.records import RolloutState
from tests.gateway.api_support import create_rollouts
from tests.gateway.support import ADMIN_TOKEN, GRADER_TOKEN
from tests.inprocess import InProcessGateway

LIMIT_BYTES = 4096
BLOB = bytes(range(256)) * 4  # not UTF-8, not JSON: proves the bytes are opaque


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """A gateway with a small body limit, so that 413 needs no large upload."""
    folder = tmp_path_factory.mktemp("gw-artifacts")
    config = folder / "gateway.yaml"
    config.write_text(f"max_body_bytes: {LIMIT_BYTES}\n")
    gw = InProcessGateway(folder / "store.db", config_path=config).start()
    yield gw
    gw.stop()


def harness_url(created, name: str) -> str:
    return created.base_url.removesuffix("/v1") + f"/artifacts/{name}"


def bearer(key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"} if key else {}


def test_admin_put_then_harness_get_and_harness_put_then_grader_get(admin, grader) -> None:
    [created] = create_rollouts(admin)
    info = admin.put_artifact(created.id, "workdir.tar.gz", BLOB)
    assert (info.rollout_id, info.attempt, info.name, info.size_bytes) == (created.id, 0, "workdir.tar.gz", len(BLOB))
    got = httpx.get(harness_url(created, "workdir.tar.gz"), headers=bearer(created.api_key))
    assert got.status_code == 200 and got.content == BLOB
    assert got.headers["content-type"] == "application/octet-stream"
    put = httpx.put(harness_url(created, "result.tar.gz"), content=BLOB[::-1], headers=bearer(created.api_key))
    assert put.status_code == 200 and put.json()["size_bytes"] == len(BLOB)
    assert grader.get_artifact(created.id, "result.tar.gz") == BLOB[::-1]
    admin.put_artifact(created.id, "result.tar.gz", b"replaced")
    assert admin.get_artifact(created.id, "result.tar.gz") == b"replaced"


def test_artifacts_are_kept_per_attempt(admin) -> None:
    [created] = create_rollouts(admin)
    admin.put_artifact(created.id, "notes", b"before the claim")
    [claimed] = [r for r in admin.claim("artifact-test", limit=1000, lease_s=60) if r.id == created.id]
    assert claimed.attempt == 1
    with pytest.raises(GatewayAPIError) as absent:
        admin.get_artifact(created.id, "notes")
    assert absent.value.status == 404 and "attempt 1" in str(absent.value)
    admin.put_artifact(created.id, "notes", b"attempt one")
    assert admin.get_artifact(created.id, "notes", attempt=0) == b"before the claim"
    assert admin.get_artifact(created.id, "notes") == b"attempt one"


@pytest.mark.parametrize(("method", "who", "status"), [
    ("GET", "other", 403), ("PUT", "other", 403), ("GET", None, 401), ("PUT", None, 401),
    ("GET", "forged", 401), ("PUT", "grader", 403), ("GET", "grader", 403),
])
def test_harness_route_auth_matrix(admin, method, who, status) -> None:
    own, other = create_rollouts(admin, 2)
    admin.put_artifact(own.id, "a.bin", BLOB)
    keys = {"other": other.api_key, "grader": GRADER_TOKEN, "forged": own.api_key[:-2] + "xx", None: None}
    response = httpx.request(method, harness_url(own, "a.bin"), content=b"x" if method == "PUT" else None,
                             headers=bearer(keys[who]))
    assert response.status_code == status, response.text
    assert admin.get_artifact(own.id, "a.bin") == BLOB  # nothing was overwritten


def test_admin_route_auth(gateway, admin) -> None:
    [created] = create_rollouts(admin)
    admin.put_artifact(created.id, "a.bin", BLOB)
    url = f"{gateway.url}/v1/admin/rollouts/{created.id}/artifacts/a.bin"
    assert httpx.put(url, content=b"x", headers=bearer(GRADER_TOKEN)).status_code == 403
    assert httpx.put(url, content=b"x", headers=bearer(created.api_key)).status_code == 403
    assert httpx.get(url, headers=bearer(created.api_key)).status_code == 403
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers=bearer(ADMIN_TOKEN)).content == BLOB


@pytest.mark.parametrize("name", ["a b", "x" * 101, "semi;colon", "%2e%2e", "caf%C3%A9"])
def test_bad_names_are_400(gateway, admin, name) -> None:
    [created] = create_rollouts(admin)
    for url in (harness_url(created, name), f"{gateway.url}/v1/admin/rollouts/{created.id}/artifacts/{name}"):
        key = created.api_key if "/r/" in url else ADMIN_TOKEN
        response = httpx.put(url, content=b"x", headers=bearer(key))
        assert response.status_code == 400, (url, response.text)
        assert response.json()["error"]["param"] == "name"


def test_absent_artifact_and_unknown_rollout_are_404(admin) -> None:
    [created] = create_rollouts(admin)
    response = httpx.get(harness_url(created, "missing"), headers=bearer(created.api_key))
    assert response.status_code == 404 and "missing" in response.json()["error"]["message"]
    with pytest.raises(GatewayAPIError) as unknown:
        admin.get_artifact("no-such-rollout", "x")
    assert unknown.value.status == 404


def test_body_over_the_limit_is_413_on_both_routes(admin) -> None:
    [created] = create_rollouts(admin)
    big = b"\0" * (LIMIT_BYTES + 1)
    response = httpx.put(harness_url(created, "big"), content=big, headers=bearer(created.api_key))
    assert response.status_code == 413
    with pytest.raises(GatewayAPIError) as too_big:
        admin.put_artifact(created.id, "big", big)
    assert too_big.value.status == 413
    with pytest.raises(GatewayAPIError):
        admin.get_artifact(created.id, "big")


def test_finished_rollout_refuses_harness_puts_but_still_serves(admin) -> None:
    [created] = create_rollouts(admin)
    admin.put_artifact(created.id, "result.tar.gz", BLOB)
    admin.set_state(created.id, RolloutState.CANCELLED)
    response = httpx.put(harness_url(created, "result.tar.gz"), content=b"late", headers=bearer(created.api_key))
    assert response.status_code == 409 and response.json()["error"]["code"] == "rollout_finished"
    assert httpx.get(harness_url(created, "result.tar.gz"), headers=bearer(created.api_key)).content == BLOB
    admin.put_artifact(created.id, "result.tar.gz", b"admin may")
    assert admin.get_artifact(created.id, "result.tar.gz") == b"admin may"


def test_wrong_method_is_405(admin) -> None:
    [created] = create_rollouts(admin)
    response = httpx.post(harness_url(created, "a.bin"), content=b"x", headers=bearer(created.api_key))
    assert response.status_code == 405


def test_openapi_documents_both_routes(gateway) -> None:
    paths = httpx.get(f"{gateway.url}/openapi.json").json()["paths"]
    assert set(paths["/r/{rollout_id}/artifacts/{name}"]) == {"get", "put"}
    admin_item = paths["/v1/admin/rollouts/{rollout_id}/artifacts/{name}"]
    assert "application/octet-stream" in admin_item["put"]["requestBody"]["content"]
