"""Every operation of the served OpenAPI, fuzzed with property-based requests (issue 12, point 5): whatever the
parameters, body and credential, the gateway never answers 5xx. Served in-process through the ASGI app (Starlette's
TestClient) with the scripted upstream behind it; bounded: a few examples per operation in the fast tier, more in the
slow one."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.config import GatewayConfig
from gateway.records import RolloutState
from tests.gateway.api_support import new_id
from tests.gateway.openapi_fuzz import JSON_VALUES, FuzzRequest, Operation, operations, requests
from tests.gateway.support import ADMIN_TOKEN, GRADER_TOKEN

ADMIN = {"authorization": f"Bearer {ADMIN_TOKEN}"}
DOCUMENT = create_app(GatewayConfig(admin_token="doc-only")).admin.openapi()
OPERATIONS = operations(DOCUMENT)
FAST_EXAMPLES, SLOW_EXAMPLES = 5, 30


def mostly(valid: st.SearchStrategy, weird: st.SearchStrategy = JSON_VALUES) -> st.SearchStrategy:
    """`valid` three times in four, `weird` otherwise."""
    return st.one_of(valid, valid, valid, weird)


MESSAGES = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "x"]),
                                           "content": mostly(st.text(max_size=10))}), min_size=1, max_size=2)
PROXY_BODIES = st.fixed_dictionaries(  # near-valid OpenAI requests: the proxy's schema is only "an object"
    {"model": mostly(st.just("policy"), st.sampled_from(["nope", ""])), "messages": mostly(MESSAGES),
     "prompt": mostly(st.text(max_size=10) | st.lists(st.integers(-1, 2**40), max_size=3))},
    optional={"stream": mostly(st.booleans()), "max_tokens": mostly(st.integers(-1, 10)),
              "logprobs": mostly(st.booleans() | st.integers(-1, 5)), "n": st.integers(0, 3)})


@pytest.fixture(scope="module")
def served(tmp_path_factory, scripted):
    # the scripted model answers at once: a 20 s upstream timeout, so that no machine load turns an answer into a 502
    config = GatewayConfig(db_url=f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'store.db'}",
                           admin_token=ADMIN_TOKEN, grader_token=GRADER_TOKEN, max_body_bytes=64 * 1024,
                           retry_attempts=1, upstream_timeout_s=20, pause_hold_timeout_s=2, pause_drain_timeout_s=1)
    with TestClient(create_app(config), base_url="http://gateway") as client:
        yield client, scripted.base_url


def _setup(client: TestClient, upstream: str, op_is_harness: bool) -> tuple[dict[str, list[str]], list[str | None]]:
    """Fresh rollouts (queued, running, finished) for one operation's examples; path values and credentials."""
    restore(client, upstream)
    ids = [new_id("fz") for _ in range(3)]
    specs = [{"id": i, "group_id": "fuzz", "input": {"q": 1}} for i in ids]
    created = client.post("/v1/admin/rollouts", json={"rollouts": specs}, headers=ADMIN).json()
    while client.post("/v1/admin/rollouts/claim", json={"controller_id": "fz", "limit": 2}, headers=ADMIN).json():
        pass
    client.patch(f"/v1/admin/rollouts/{ids[2]}", json={"state": RolloutState.SUCCEEDED}, headers=ADMIN)
    again = client.post("/v1/admin/rollouts", json={"rollouts": specs[:1]}, headers=ADMIN).json()
    keys = [created[0]["api_key"], again[0]["api_key"], created[1]["api_key"]]
    values = {"rollout_id": [ids[0], ids[0], *ids], "name": ["workdir.tar.gz", "result.tar.gz", "..", "a" * 101]}
    credentials = [keys[1], ADMIN_TOKEN] if op_is_harness else [ADMIN_TOKEN, GRADER_TOKEN]
    return values, [*credentials, GRADER_TOKEN, *keys, None, "not-a-key", "hrl.eA.1.forged"]


def restore(client: TestClient, upstream: str) -> None:
    """Undo what an example may have done to the gateway as a whole: a pause, the model registry."""
    client.post("/v1/admin/resume", headers=ADMIN)
    for model in client.get("/v1/admin/models", headers=ADMIN).json():
        name = quote(model["name"], safe="").replace(".", "%2E")  # one path segment, whatever the fuzz named it
        assert client.delete(f"/v1/admin/models/{name}", headers=ADMIN).status_code == 200
    client.post("/v1/admin/models", json={"name": "policy", "base_url": upstream}, headers=ADMIN)


def send(client: TestClient, request: FuzzRequest):
    return client.request(request.method, request.url, content=request.body, headers=request.headers)


def fuzz(served, op: Operation, examples: int) -> None:
    client, upstream = served
    path_values, credentials = _setup(client, upstream, op.path.startswith("/r/"))
    global_effects = op.path.startswith(("/v1/admin/models", "/v1/admin/pause"))

    bodies = PROXY_BODIES if op.path.endswith("completions") else None

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(request=requests(DOCUMENT, op, path_values, credentials, bodies))
    def no_5xx(request: FuzzRequest) -> None:
        try:
            response = send(client, request)
        finally:
            if global_effects:
                restore(client, upstream)
        assert response.status_code < 500, (request, response.status_code, response.text[:500])

    no_5xx()


@pytest.mark.parametrize("op", OPERATIONS, ids=[f"{o.method.upper()} {o.path}" for o in OPERATIONS])
def test_no_operation_answers_5xx(served, op: Operation) -> None:
    fuzz(served, op, FAST_EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("op", OPERATIONS, ids=[f"{o.method.upper()} {o.path}" for o in OPERATIONS])
def test_no_operation_answers_5xx_longer(served, op: Operation) -> None:
    fuzz(served, op, SLOW_EXAMPLES)


def test_every_served_operation_is_fuzzed() -> None:
    paths = {o.path for o in OPERATIONS}
    assert {"/r/{rollout_id}/v1/chat/completions", "/v1/admin/rollouts/{rollout_id}/reward",
            "/r/{rollout_id}/artifacts/{name}", "/health"} <= paths and len(OPERATIONS) >= 20
