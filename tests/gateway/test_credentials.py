"""The credential matrix against a real gateway: rollout keys, the grader token, the admin token, bad keys."""

from __future__ import annotations

import base64
import socket
import time

import pytest

from gateway.auth import mint_rollout_key
from gateway.client import GatewayClient
from gateway.records import RolloutSpec, RolloutState
from tests.gateway.api_support import (
    CHAT_PATH,
    COMPLETIONS_PATH,
    MODELS_PATH,
    chat,
    completion,
    create_rollouts,
    error_of,
    request,
)
from tests.gateway.support import ADMIN_TOKEN, GRADER_TOKEN
from tests.inprocess import InProcessGateway

AGENT_EVENT = {"kind": "agent_output", "payload": {"text": "done"}}
LOG_EVENT = {"kind": "log", "payload": {"line": "step 1"}}
REWARD_EVENT = {"kind": "reward", "payload": {"reward": 1.0}}
STATE_EVENT = {"kind": "state", "payload": {"state": "succeeded"}}
MODEL = {"name": "spare", "base_url": "http://127.0.0.1:9/v1"}


@pytest.fixture(scope="module")
def rollouts(gateway):
    """Two queued rollouts `own` and `other`, and a running one `graded` (rewards need a run)."""
    with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
        own, other, graded = create_rollouts(admin, 3, prefix="cred")
        admin.set_state(graded.id, RolloutState.RUNNING)
    return {"own": own, "other": other, "graded": graded}


def call(gateway, rollouts, method: str, path: str, token: str | None, body=None):
    path = path.format(own=rollouts["own"].id, other=rollouts["other"].id, graded=rollouts["graded"].id)
    return request(gateway.url, method, path, token, body)


ROLLOUT_KEY_ALLOWED = [
    ("POST", "/r/{own}" + CHAT_PATH, chat()),
    ("POST", "/r/{own}" + COMPLETIONS_PATH, completion()),
    ("GET", "/r/{own}" + MODELS_PATH, None),
    ("POST", "/r/{own}/events", AGENT_EVENT),
    ("POST", "/r/{own}/events", LOG_EVENT),
]

ROLLOUT_KEY_FORBIDDEN = [
    ("POST", "/r/{other}" + CHAT_PATH, chat()),
    ("POST", "/r/{other}" + COMPLETIONS_PATH, completion()),
    ("GET", "/r/{other}" + MODELS_PATH, None),
    ("POST", "/r/{other}/events", AGENT_EVENT),
    ("POST", "/r/{own}/events", REWARD_EVENT),
    ("POST", "/r/{own}/events", STATE_EVENT),
    ("GET", "/v1/admin/rollouts/{own}", None),
    ("GET", "/v1/admin/rollouts/{other}", None),
    ("GET", "/v1/admin/rollouts/{own}/calls", None),
    ("GET", "/v1/admin/rollouts/{own}/events", None),
    ("GET", "/v1/admin/rollouts/finished", None),
    ("POST", "/v1/admin/rollouts/{own}/events", LOG_EVENT),
    ("POST", "/v1/admin/rollouts/{own}/reward", {"reward": 1.0}),
    ("POST", "/v1/admin/rollouts", {"rollouts": [{"id": "sneaky", "group_id": "g"}]}),
    ("POST", "/v1/admin/rollouts/claim", {"controller_id": "sneaky"}),
    ("PATCH", "/v1/admin/rollouts/{own}", {"state": "cancelled"}),
    ("POST", "/v1/admin/pause", None),
    ("POST", "/v1/admin/resume", None),
    ("GET", "/v1/admin/state", None),
    ("GET", "/v1/admin/models", None),
    ("POST", "/v1/admin/models", MODEL),
    ("PATCH", "/v1/admin/models/policy", {"version": 99}),
    ("DELETE", "/v1/admin/models/policy", None),
]


@pytest.mark.parametrize(("method", "path", "body"), ROLLOUT_KEY_ALLOWED)
def test_rollout_key_may_use_its_own_rollout(gateway, rollouts, method, path, body) -> None:
    response = call(gateway, rollouts, method, path, rollouts["own"].api_key, body)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(("method", "path", "body"), ROLLOUT_KEY_FORBIDDEN)
def test_rollout_key_may_do_nothing_else(gateway, rollouts, method, path, body) -> None:
    assert error_of(call(gateway, rollouts, method, path, rollouts["own"].api_key, body), 403)["code"] == "forbidden"


GRADER_ALLOWED = [
    ("POST", "/v1/admin/rollouts/{graded}/reward", {"reward": 0.5}),
    ("POST", "/v1/admin/rollouts/{graded}/events", LOG_EVENT),
    ("GET", "/v1/admin/rollouts/{graded}", None),
    ("GET", "/v1/admin/rollouts/{graded}/events", None),
]

GRADER_FORBIDDEN = [
    ("POST", "/v1/admin/pause", None),
    ("POST", "/v1/admin/resume", None),
    ("POST", "/v1/admin/rollouts/claim", {"controller_id": "grader"}),
    ("POST", "/v1/admin/models", MODEL),
    ("PATCH", "/v1/admin/models/policy", {"version": 99}),
    ("DELETE", "/v1/admin/models/policy", None),
    ("GET", "/v1/admin/rollouts/{graded}/calls", None),
    ("GET", "/v1/admin/rollouts/finished", None),
    ("POST", "/v1/admin/rollouts", {"rollouts": [{"id": "sneaky", "group_id": "g"}]}),
    ("PATCH", "/v1/admin/rollouts/{graded}", {"state": "cancelled"}),
    ("POST", "/r/{graded}" + CHAT_PATH, chat()),
    ("POST", "/r/{graded}/events", LOG_EVENT),
]


@pytest.mark.parametrize(("method", "path", "body"), GRADER_ALLOWED)
def test_grader_may_grade_and_read_a_rollout(gateway, rollouts, method, path, body) -> None:
    assert call(gateway, rollouts, method, path, GRADER_TOKEN, body).status_code == 200


@pytest.mark.parametrize(("method", "path", "body"), GRADER_FORBIDDEN)
def test_grader_may_not_control_or_read_calls(gateway, rollouts, method, path, body) -> None:
    assert error_of(call(gateway, rollouts, method, path, GRADER_TOKEN, body), 403)["code"] == "forbidden"


ADMIN_ALLOWED = [
    ("POST", "/r/{own}" + CHAT_PATH, chat()),
    ("POST", "/r/{other}" + COMPLETIONS_PATH, completion()),
    ("GET", "/r/{own}" + MODELS_PATH, None),
    ("POST", "/r/{own}/events", STATE_EVENT),
    ("GET", "/v1/admin/rollouts/{own}", None),
    ("GET", "/v1/admin/rollouts/{own}/calls", None),
    ("GET", "/v1/admin/rollouts/{own}/events", None),
    ("GET", "/v1/admin/rollouts/finished", None),
    ("POST", "/v1/admin/rollouts/{graded}/reward", {"reward": 1.0}),
    ("GET", "/v1/admin/state", None),
    ("GET", "/v1/admin/models", None),
    ("PATCH", "/v1/admin/models/policy", {"version": 3}),
]


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ALLOWED)
def test_admin_may_do_everything(gateway, rollouts, method, path, body) -> None:
    assert call(gateway, rollouts, method, path, ADMIN_TOKEN, body).status_code == 200


def test_admin_may_register_and_delete_models(gateway, rollouts) -> None:
    statuses = [call(gateway, rollouts, "POST", "/v1/admin/models", ADMIN_TOKEN, MODEL).status_code,
                call(gateway, rollouts, "DELETE", "/v1/admin/models/spare", ADMIN_TOKEN).status_code]
    assert statuses == [200, 200]


def test_admin_may_pause_and_resume(gateway, rollouts) -> None:
    paused = call(gateway, rollouts, "POST", "/v1/admin/pause", ADMIN_TOKEN)
    resumed = call(gateway, rollouts, "POST", "/v1/admin/resume", ADMIN_TOKEN)
    assert [(paused.status_code, paused.json()["paused"]), (resumed.status_code, resumed.json()["paused"])] == [
        (200, True), (200, False)]


def _forged(rollout_id: str) -> str:
    id_part = base64.urlsafe_b64encode(rollout_id.encode()).rstrip(b"=").decode()
    return f"hrl.{id_part}.0.{'A' * 32}"


BAD_CREDENTIALS = {
    "missing": None,
    "empty bearer": "",
    "garbage": "not-a-key",
    "wrong prefix": "sk-0123456789abcdef",
    "malformed key": "hrl.%%%.zzz",
    "forged mac": "FORGED",
    "other secret": "OTHER_SECRET",
    "admin token with a typo": ADMIN_TOKEN + "x",
}
PROBED_ROUTES = [("POST", "/r/{own}" + CHAT_PATH, chat()), ("POST", "/r/{own}/events", AGENT_EVENT),
                 ("GET", "/v1/admin/rollouts/{own}", None), ("POST", "/v1/admin/pause", None)]


@pytest.mark.parametrize("credential", BAD_CREDENTIALS.values(), ids=BAD_CREDENTIALS.keys())
@pytest.mark.parametrize(("method", "path", "body"), PROBED_ROUTES)
def test_missing_malformed_or_forged_credentials_are_401(gateway, rollouts, credential, method, path, body) -> None:
    if credential == "FORGED":
        credential = _forged(rollouts["own"].id)
    elif credential == "OTHER_SECRET":
        credential = mint_rollout_key(b"x" * 32, rollouts["own"].id, 0)
    assert error_of(call(gateway, rollouts, method, path, credential, body), 401)["code"] == "invalid_api_key"


def test_a_non_bearer_scheme_is_401(gateway, rollouts) -> None:
    response = request(gateway.url, "GET", f"/r/{rollouts['own'].id}{MODELS_PATH}", None,
                       headers={"authorization": f"Basic {rollouts['own'].api_key}"})
    assert error_of(response, 401)["type"] == "authentication_error"


def test_recreating_a_rollout_returns_the_same_key(admin, rollouts) -> None:
    own = rollouts["own"]
    spec = admin.get_rollout(own.id)
    (again,) = admin.create_rollouts([RolloutSpec(id=own.id, group_id=spec.group_id, input=spec.input,
                                                  mode=spec.mode, max_attempts=spec.max_attempts)])
    assert (again.api_key, again.created) == (own.api_key, False)


def test_keys_survive_a_gateway_restart(tmp_path, scripted) -> None:
    gw = InProcessGateway(tmp_path / "restart.db").start()
    try:
        with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
            admin.register_model("policy", scripted.base_url)
            (created,) = create_rollouts(admin, prefix="restart")
            spec = admin.get_rollout(created.id)
        gw.stop()
        gw.start()
        response = request(gw.url, "POST", f"/r/{created.id}{CHAT_PATH}", created.api_key, chat())
        with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
            (again,) = admin.create_rollouts([RolloutSpec(id=spec.id, group_id=spec.group_id)])
        assert (response.status_code, again.api_key, again.created) == (200, created.api_key, False)
    finally:
        gw.stop()


def _raw_exchange(gateway_url: str, request_head: bytes, timeout_s: float = 5.0) -> tuple[bytes, float]:
    """Send only `request_head` (headers, no body) on a raw socket; (the answer's first bytes, seconds taken)."""
    host, port = gateway_url.removeprefix("http://").split(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=timeout_s) as conn:
        conn.sendall(request_head)
        answer = conn.recv(4096)
    return answer, time.monotonic() - started


@pytest.mark.parametrize("token", [None, "nope", "ROLLOUT_KEY"])
def test_the_admin_api_checks_the_credential_before_reading_a_body(gateway, rollouts, token) -> None:
    """The attack: the admin API read up to 32 MiB before checking the token. A stranger declaring a 30 MiB body and
    sending none of it is answered at once (401/403): the gateway does not wait for the body it would not read."""
    token = rollouts["own"].api_key if token == "ROLLOUT_KEY" else token
    head = (b"POST /v1/admin/rollouts HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: 31457280\r\n" + (f"authorization: Bearer {token}\r\n".encode() if token else b"")
            + b"\r\n")
    answer, seconds = _raw_exchange(gateway.url, head)
    status = answer.split(b" ", 2)[1]
    assert status == (b"403" if token == rollouts["own"].api_key else b"401") and seconds < 2.0, answer[:200]


def test_the_admin_token_still_waits_for_its_body(gateway) -> None:
    head = (b"POST /v1/admin/rollouts HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: 100\r\nauthorization: Bearer " + ADMIN_TOKEN.encode() + b"\r\n\r\n")
    with pytest.raises(TimeoutError):
        _raw_exchange(gateway.url, head, timeout_s=0.5)
