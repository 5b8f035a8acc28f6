"""Bad input against a real gateway: each gets a clear OpenAI-style error and leaves nothing half-written."""

from __future__ import annotations

import httpx
import pytest

from gateway.client import GatewayClient
from gateway.records import FailureKind, RolloutState
from tests.gateway.api_support import (
    CHAT_PATH,
    COMPLETIONS_PATH,
    chat,
    completion,
    create_rollouts,
    error_of,
    new_id,
    request,
    write_config,
)
from tests.gateway.support import ADMIN_TOKEN, GatewayProcess


@pytest.fixture(scope="module")
def target(gateway):
    """A queued rollout that receives only bad calls."""
    with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
        (created,) = create_rollouts(admin, prefix="bad")
    return created


def post_raw(url: str, key: str, content: bytes | object) -> httpx.Response:
    return httpx.post(url, content=content, timeout=30,
                      headers={"authorization": f"Bearer {key}", "content-type": "application/json"})


MALFORMED = {
    "not json": (CHAT_PATH, b"{not json", None),
    "truncated json": (CHAT_PATH, b'{"messages": [', None),
    "json array": (CHAT_PATH, b"[1, 2]", None),
    "json string": (COMPLETIONS_PATH, b'"hello"', None),
    "messages not a list": (CHAT_PATH, b'{"model": "policy", "messages": "hello"}', "messages"),
    "messages empty": (CHAT_PATH, b'{"model": "policy", "messages": []}', "messages"),
    "messages missing": (CHAT_PATH, b'{"model": "policy"}', "messages"),
    "prompt a number": (COMPLETIONS_PATH, b'{"model": "policy", "prompt": 5}', "prompt"),
    "prompt missing": (COMPLETIONS_PATH, b'{"model": "policy"}', "prompt"),
    "stream a string": (CHAT_PATH, b'{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}', "stream"),
    "model a number": (COMPLETIONS_PATH, b'{"model": 5, "prompt": "x"}', "model"),
}


@pytest.mark.parametrize(("path", "raw", "param"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_calls_are_400_and_record_nothing(admin, target, path, raw, param) -> None:
    error = error_of(post_raw(target.base_url + path.removeprefix("/v1"), target.api_key, raw), 400)
    assert (error["code"], error["param"], admin.calls(target.id)) == ("invalid_request", param, [])


def test_a_malformed_harness_event_is_400_and_stores_nothing(admin, target) -> None:
    before = len(admin.list_events(target.id))
    url = target.base_url.removesuffix("/v1") + "/events"
    error = error_of(post_raw(url, target.api_key, b'{"kind": "shout", "payload": {}}'), 400)
    assert (error["code"], len(admin.list_events(target.id))) == ("invalid_request", before)


UNKNOWN_ROLLOUT = [
    ("POST", "/r/{id}" + CHAT_PATH, chat()),
    ("POST", "/r/{id}/events", {"kind": "log", "payload": {}}),
    ("GET", "/v1/admin/rollouts/{id}", None),
    ("GET", "/v1/admin/rollouts/{id}/calls", None),
    ("GET", "/v1/admin/rollouts/{id}/events", None),
    ("POST", "/v1/admin/rollouts/{id}/events", {"kind": "log", "payload": {}}),
    ("POST", "/v1/admin/rollouts/{id}/reward", {"reward": 1.0}),
    ("PATCH", "/v1/admin/rollouts/{id}", {"state": "cancelled"}),
    ("POST", "/v1/admin/rollouts/{id}/lease", {"controller_id": "c"}),
]


@pytest.mark.parametrize(("method", "path", "body"), UNKNOWN_ROLLOUT)
def test_unknown_rollout_is_404(gateway, method, path, body) -> None:
    response = request(gateway.url, method, path.format(id="no-such-rollout"), ADMIN_TOKEN, body)
    assert error_of(response, 404)["code"] == "not_found"


@pytest.mark.parametrize(("method", "path", "status"), [
    ("POST", "/r/{id}/v1/embeddings", 404), ("POST", "/r/{id}/v2/chat/completions", 404), ("GET", "/r/", 404),
    ("GET", "/r/{id}/v1/chat/completions", 405), ("DELETE", "/r/{id}/events", 405),
    ("GET", "/v1/admin/nothing-here", 404), ("DELETE", "/v1/admin/rollouts", 405),
])
def test_unknown_routes_get_openai_style_errors(gateway, target, method, path, status) -> None:
    token = target.api_key if path.startswith("/r/") else ADMIN_TOKEN  # a rollout key is 403 on any admin path
    response = request(gateway.url, method, path.format(id=target.id), token)
    assert error_of(response, status)["message"]


@pytest.fixture(scope="module")
def finished(gateway):
    """One rollout in each terminal state."""
    with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
        succeeded, failed, cancelled = create_rollouts(admin, 3, prefix="done")
        for rollout in (succeeded, failed):
            admin.set_state(rollout.id, RolloutState.RUNNING)
        admin.set_state(succeeded.id, RolloutState.SUCCEEDED)
        admin.set_state(failed.id, RolloutState.FAILED, FailureKind.AGENT, "gave up")
        admin.set_state(cancelled.id, RolloutState.CANCELLED)
    return {"succeeded": succeeded, "failed": failed, "cancelled": cancelled}


@pytest.mark.parametrize("state", ["succeeded", "failed", "cancelled"])
@pytest.mark.parametrize("path", [CHAT_PATH, COMPLETIONS_PATH])
def test_calls_on_a_terminal_rollout_are_409_and_record_nothing(admin, finished, state, path) -> None:
    rollout = finished[state]
    body = chat() if path == CHAT_PATH else completion()
    response = httpx.post(rollout.base_url + path.removeprefix("/v1"), json=body,
                          headers={"authorization": f"Bearer {rollout.api_key}"}, timeout=30)
    assert (error_of(response, 409)["code"], admin.calls(rollout.id)) == ("rollout_finished", [])


@pytest.mark.parametrize("state", ["succeeded", "failed", "cancelled"])
def test_events_on_a_terminal_rollout_are_409(admin, finished, state) -> None:
    rollout = finished[state]
    before = len(admin.list_events(rollout.id))
    response = httpx.post(rollout.base_url.removesuffix("/v1") + "/events", json={"kind": "log", "payload": {}},
                          headers={"authorization": f"Bearer {rollout.api_key}"}, timeout=30)
    assert (error_of(response, 409)["type"], len(admin.list_events(rollout.id))) == ("conflict_error", before)


VALIDATION = {
    "bad id characters": ("POST", "/v1/admin/rollouts", {"rollouts": [{"id": "has space", "group_id": "g"}]},
                          "rollouts.0.id"),
    "missing group_id": ("POST", "/v1/admin/rollouts", {"rollouts": [{"id": "ok-id"}]}, "rollouts.0.group_id"),
    "max_attempts zero": ("POST", "/v1/admin/rollouts",
                          {"rollouts": [{"id": "ok-id", "group_id": "g", "max_attempts": 0}]},
                          "rollouts.0.max_attempts"),
    "unknown field": ("POST", "/v1/admin/rollouts", {"rollouts": [{"id": "ok-id", "group_id": "g", "colour": 1}]},
                      "rollouts.0.colour"),
    "empty batch": ("POST", "/v1/admin/rollouts", {"rollouts": []}, "rollouts"),
    "bad mode": ("POST", "/v1/admin/rollouts", {"rollouts": [{"id": "ok-id", "group_id": "g", "mode": "test"}]},
                 "rollouts.0.mode"),
    "claim limit zero": ("POST", "/v1/admin/rollouts/claim", {"controller_id": "c", "limit": 0}, "limit"),
    "claim without controller": ("POST", "/v1/admin/rollouts/claim", {"limit": 1}, "controller_id"),
    "reward not a number": ("POST", "/v1/admin/rollouts/{id}/reward", {"reward": "high"}, "reward"),
    "unknown state": ("PATCH", "/v1/admin/rollouts/{id}", {"state": "paused"}, "state"),
    "model url scheme": ("POST", "/v1/admin/models", {"name": "m", "base_url": "ftp://x"}, "base_url"),
    "negative version": ("PATCH", "/v1/admin/models/policy", {"version": -1}, "version"),
    "negative wait": ("GET", "/v1/admin/rollouts/finished?wait_s=-1", None, "wait_s"),
}


@pytest.mark.parametrize(("method", "path", "body", "field"), VALIDATION.values(), ids=VALIDATION.keys())
def test_admin_validation_errors_are_400_naming_the_field(gateway, target, method, path, body, field) -> None:
    error = error_of(request(gateway.url, method, path.format(id=target.id), ADMIN_TOKEN, body), 400)
    assert (error["code"], error["param"], field in error["message"]) == ("invalid_request", field, True)


def test_malformed_json_on_the_admin_api_is_400_and_creates_nothing(gateway, admin) -> None:
    response = httpx.post(gateway.url + "/v1/admin/rollouts", content=b'{"rollouts": [{"id": "half-', timeout=30,
                          headers={"authorization": f"Bearer {ADMIN_TOKEN}", "content-type": "application/json"})
    error = error_of(response, 400)
    status = request(gateway.url, "GET", "/v1/admin/rollouts/half-", ADMIN_TOKEN).status_code
    assert (error["code"], "JSON" in error["message"], status) == ("invalid_request", True, 404)


def test_a_batch_with_one_bad_row_creates_none(gateway) -> None:
    good = new_id("good")
    rows = [{"id": good, "group_id": "g"}, {"id": "bad row", "group_id": "g"}]
    error = error_of(request(gateway.url, "POST", "/v1/admin/rollouts", ADMIN_TOKEN, {"rollouts": rows}), 400)
    status = request(gateway.url, "GET", f"/v1/admin/rollouts/{good}", ADMIN_TOKEN).status_code
    assert (error["param"], status) == ("rollouts.1.id", 404)


def test_duplicate_ids_in_one_request_are_400_and_create_none(gateway) -> None:
    first, dup = new_id("first"), new_id("dup")
    rows = [{"id": first, "group_id": "g"}, {"id": dup, "group_id": "g"}, {"id": dup, "group_id": "g"}]
    error = error_of(request(gateway.url, "POST", "/v1/admin/rollouts", ADMIN_TOKEN, {"rollouts": rows}), 400)
    missing = [request(gateway.url, "GET", f"/v1/admin/rollouts/{i}", ADMIN_TOKEN).status_code for i in (first, dup)]
    assert (error["param"], missing) == ("rollouts", [404, 404])


def test_a_conflicting_recreate_is_409_and_creates_none_of_the_batch(gateway, target) -> None:
    fresh = new_id("fresh")
    rows = [{"id": fresh, "group_id": "g"}, {"id": target.id, "group_id": "another-group"}]
    error = error_of(request(gateway.url, "POST", "/v1/admin/rollouts", ADMIN_TOKEN, {"rollouts": rows}), 409)
    status = request(gateway.url, "GET", f"/v1/admin/rollouts/{fresh}", ADMIN_TOKEN).status_code
    assert (error["param"], target.id in error["message"], status) == ("id", True, 404)


@pytest.mark.parametrize(("start", "target_state", "allowed"), [
    ("queued", "succeeded", "cancelled, running"),
    ("queued", "failed", "cancelled, running"),
    ("succeeded", "running", "none, it is terminal"),
    ("cancelled", "queued", "none, it is terminal"),
])
def test_invalid_transitions_are_409_with_the_allowed_list(admin, gateway, finished, start, target_state,
                                                            allowed) -> None:
    rollout_id = finished[start].id if start in finished else create_rollouts(admin, prefix="sm")[0].id
    events_before = len(admin.list_events(rollout_id))
    body = {"state": target_state, **({"failure_kind": "agent"} if target_state == "failed" else {})}
    error = error_of(request(gateway.url, "PATCH", f"/v1/admin/rollouts/{rollout_id}", ADMIN_TOKEN, body), 409)
    after = (admin.get_rollout(rollout_id).state.value, len(admin.list_events(rollout_id)))
    assert (error["code"], f"allowed from {start}: {allowed}" in error["message"], after) == (
        "invalid_transition", True, (start, events_before))


def test_failed_without_failure_kind_is_400_and_changes_nothing(admin, gateway) -> None:
    (created,) = create_rollouts(admin, prefix="fk")
    admin.set_state(created.id, RolloutState.RUNNING)
    error = error_of(request(gateway.url, "PATCH", f"/v1/admin/rollouts/{created.id}", ADMIN_TOKEN,
                             {"state": "failed"}), 400)
    assert (error["param"], admin.get_rollout(created.id).state) == ("failure_kind", RolloutState.RUNNING)


def test_reward_on_a_queued_rollout_is_409_and_not_stored(admin, gateway, target) -> None:
    error_of(request(gateway.url, "POST", f"/v1/admin/rollouts/{target.id}/reward", ADMIN_TOKEN, {"reward": 1}), 409)
    assert admin.get_rollout(target.id).reward is None


def test_openapi_is_served_with_the_harness_paths(gateway) -> None:
    paths = httpx.get(gateway.url + "/openapi.json", timeout=30).json()["paths"]
    expected = {"/r/{rollout_id}/v1/chat/completions", "/r/{rollout_id}/v1/completions",
                "/r/{rollout_id}/v1/models", "/r/{rollout_id}/events", "/v1/admin/rollouts", "/v1/admin/pause"}
    assert expected <= set(paths)


LIMIT_BYTES = 4096


@pytest.fixture(scope="module")
def small_gateway(tmp_path_factory, scripted):
    """A gateway whose body limit is LIMIT_BYTES, set in a YAML config file."""
    folder = tmp_path_factory.mktemp("small")
    config = write_config(folder / "gateway.yaml", max_body_bytes=LIMIT_BYTES, retry_attempts=1)
    gw = GatewayProcess(folder / "store.db", config_path=config).start()
    with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
        admin.register_model("policy", scripted.base_url)
        (created,) = create_rollouts(admin, prefix="big")
    yield gw, created
    gw.stop()


def _chunks(total_bytes: int):
    yield b'{"model": "policy", "prompt": "'
    for _ in range(total_bytes // 1024):
        yield b"x" * 1024
    yield b'"}'


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_oversized_calls_are_413_and_record_nothing(small_gateway, chunked) -> None:
    gw, rollout = small_gateway
    content = _chunks(LIMIT_BYTES * 2) if chunked else b"".join(_chunks(LIMIT_BYTES * 2))
    error = error_of(post_raw(f"{gw.url}/r/{rollout.id}{COMPLETIONS_PATH}", rollout.api_key, content), 413)
    with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
        assert (error["code"], admin.calls(rollout.id)) == ("payload_too_large", [])


def test_a_call_under_the_limit_passes(small_gateway) -> None:
    gw, rollout = small_gateway
    response = post_raw(f"{gw.url}/r/{rollout.id}{COMPLETIONS_PATH}", rollout.api_key,
                        b'{"model": "policy", "prompt": "' + b"x" * (LIMIT_BYTES // 2) + b'"}')
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_oversized_admin_bodies_are_413_and_create_nothing(small_gateway, chunked) -> None:
    gw, _ = small_gateway
    rollout_id = new_id("huge")
    raw = b'{"rollouts": [{"id": "%s", "group_id": "g", "input": {"blob": "%s"}}]}' % (
        rollout_id.encode(), b"x" * LIMIT_BYTES * 2)
    content = iter([raw[:100], raw[100:]]) if chunked else raw
    response = httpx.post(gw.url + "/v1/admin/rollouts", content=content, timeout=30,
                          headers={"authorization": f"Bearer {ADMIN_TOKEN}", "content-type": "application/json"})
    error = error_of(response, 413)
    status = request(gw.url, "GET", f"/v1/admin/rollouts/{rollout_id}", ADMIN_TOKEN).status_code
    assert (error["code"], status) == ("payload_too_large", 404)


def test_an_oversized_harness_event_is_413_and_stores_nothing(small_gateway) -> None:
    gw, rollout = small_gateway
    raw = b'{"kind": "log", "payload": {"line": "' + b"x" * LIMIT_BYTES + b'"}}'
    error = error_of(post_raw(f"{gw.url}/r/{rollout.id}/events", rollout.api_key, raw), 413)
    with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
        assert (error["code"], admin.list_events(rollout.id)) == ("payload_too_large", [])


@pytest.mark.parametrize("path", [
    "/v1/admin/rollouts/{id}/calls?attempt=9223372036854775808",  # found by the OpenAPI fuzz: a bare 500 before
    "/v1/admin/rollouts/{id}/calls?attempt=1000001",
    "/v1/admin/rollouts/{id}/artifacts/workdir.tar.gz?attempt=9223372036854775808",
    "/v1/admin/rollouts/finished?after=9223372036854775808",
])
def test_integers_past_the_stores_range_are_400_naming_the_parameter(gateway, target, path):
    response = httpx.get(gateway.url + path.format(id=target.id), timeout=30,
                         headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == path.rsplit("?", 1)[1].split("=")[0]
