"""The harness proxy against scripted upstreams: capture, byte-for-byte answers, forced fields, retries, routing."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace

import httpx
import orjson
import pytest

from gateway.client import GatewayClient
from gateway.records import CallStatus, RolloutMode
from gateway.sampling import NEUTRAL
from gateway.scripted import Script
from tests.gateway.api_support import chat, completion, create_rollouts, error_of, write_config
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway, InProcessScripted

TOKENS = Script(prompt_tokens=16, response_tokens=8)
ENGINE_VERSION, REGISTERED_VERSION = 7, 3
PROMPT_IDS, RESPONSE_IDS = list(range(1000, 1016)), list(range(5000, 5008))
LOGPROBS = [-0.01 * (i + 1) for i in range(8)]
RETRY_ATTEMPTS = 3


@pytest.fixture(scope="module")
def upstreams():
    """Scripted engines by role; `flaky` fails its first 2 calls, `dead` every call."""
    procs = {
        "policy": InProcessScripted(replace(TOKENS, policy_version=ENGINE_VERSION)),
        "echo": InProcessScripted(replace(TOKENS, echo_request=True)),
        "pair-a": InProcessScripted(TOKENS), "pair-b": InProcessScripted(TOKENS),
        "flaky": InProcessScripted(replace(TOKENS, fail_first=2)),
        "dead": InProcessScripted(replace(TOKENS, fail_first=1000000)),
    }
    for proc in procs.values():
        proc.start()
    yield procs
    for proc in procs.values():
        proc.stop()


@pytest.fixture(scope="module")
def gw(tmp_path_factory, upstreams):
    """A gateway with fast retries and the models policy, echo, pair (two endpoints), flaky and dead."""
    folder = tmp_path_factory.mktemp("proxy")
    config = write_config(folder / "gateway.yaml", retry_attempts=RETRY_ATTEMPTS, retry_backoff_s=0.01)
    gateway = InProcessGateway(folder / "store.db", config_path=config).start()
    with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
        admin.register_model("policy", upstreams["policy"].base_url, version=REGISTERED_VERSION)
        for name in ("echo", "flaky", "dead"):
            admin.register_model(name, upstreams[name].base_url)
        for name in ("pair-a", "pair-b"):
            admin.register_model("pair", upstreams[name].base_url)
    yield gateway
    gateway.stop()


@pytest.fixture
def admin(gw):
    with GatewayClient(gw.url, ADMIN_TOKEN) as client:
        yield client


def call(created, path: str, body: dict) -> httpx.Response:
    return httpx.post(created.base_url + path, json=body, timeout=30,
                      headers={"authorization": f"Bearer {created.api_key}"})


CASES = {"chat": ("/chat/completions", chat()), "completion": ("/completions", completion()),
         "chat-stream": ("/chat/completions", chat(stream=True))}


@pytest.mark.parametrize(("path", "body"), CASES.values(), ids=CASES.keys())
def test_tokens_logprobs_and_version_are_recorded(admin, upstreams, path, body) -> None:
    (created,) = create_rollouts(admin, prefix="cap")
    response = call(created, path, body)
    (record,) = admin.calls(created.id)
    assert response.status_code == 200
    assert (record.prompt_token_ids, record.response_token_ids) == (PROMPT_IDS, RESPONSE_IDS)
    assert record.response_logprobs == pytest.approx(LOGPROBS)
    assert (record.policy_version, record.status, record.http_status, record.stream) == (
        ENGINE_VERSION, CallStatus.OK, 200, body.get("stream", False))
    assert (record.response_text, record.finish_reason, record.n_choices) == ("t" * 8, "length", 1)
    assert (record.upstream, record.request, record.response_raw) == (
        upstreams["policy"].base_url, body, response.text)


def test_the_version_header_is_the_engines_when_known_before_the_body(admin) -> None:
    """Unary answers carry the engine's version; a stream's headers precede its body, so they carry the registered
    version unless the engine sends an X-Policy-Version header (the record always holds the engine's)."""
    (created,) = create_rollouts(admin, prefix="hdr")
    headers = [call(created, path, body).headers["x-policy-version"] for path, body in CASES.values()]
    assert headers == [str(ENGINE_VERSION), str(ENGINE_VERSION), str(REGISTERED_VERSION)]


def _without_id(raw: bytes) -> bytes:
    return re.sub(rb'"id":"(chatcmpl|cmpl)-\d+"', b'"id":"ID"', raw)


@pytest.mark.parametrize(("path", "body"), CASES.values(), ids=CASES.keys())
def test_the_harness_gets_the_upstream_body_byte_for_byte(admin, upstreams, path, body) -> None:
    (created,) = create_rollouts(admin, prefix="bytes")
    through_gateway = call(created, path, body).content
    forwarded = {**body, "model": "policy", "return_token_ids": True,
                 "logprobs": True if path == "/chat/completions" else 0}
    direct = httpx.post(upstreams["policy"].base_url + path, content=orjson.dumps(forwarded), timeout=30,
                        headers={"content-type": "application/json"}).content
    assert _without_id(through_gateway) == _without_id(direct)
    assert through_gateway != _without_id(through_gateway), "the id placeholder was not found"


FORCED = {
    "train chat": (RolloutMode.TRAIN, "/chat/completions", chat("echo"), {"logprobs": True}),
    "train chat top_logprobs kept": (RolloutMode.TRAIN, "/chat/completions", chat("echo", top_logprobs=2),
                                     {"logprobs": True, "top_logprobs": 2}),
    "train completion": (RolloutMode.TRAIN, "/completions", completion("echo"), {"logprobs": 0}),
    "train completion keeps its logprobs": (RolloutMode.TRAIN, "/completions", completion("echo", logprobs=5),
                                            {"logprobs": 5}),
    "val chat": (RolloutMode.VAL, "/chat/completions", chat("echo"), {}),
    "val chat keeps asked logprobs": (RolloutMode.VAL, "/chat/completions", chat("echo", logprobs=True),
                                      {"logprobs": True}),
    "val completion": (RolloutMode.VAL, "/completions", completion("echo"), {}),
}


@pytest.mark.parametrize(("mode", "path", "body", "forced"), FORCED.values(), ids=FORCED.keys())
def test_token_ids_always_and_logprobs_in_train_mode_are_forced_upstream(admin, mode, path, body, forced) -> None:
    (created,) = create_rollouts(admin, prefix="echo", mode=mode)
    response = call(created, path, {**body, "temperature": 0.5})
    (record,) = admin.calls(created.id)
    sampling = {**NEUTRAL, "temperature": 1.0 if mode == RolloutMode.TRAIN else 0.5}  # train: the policy's, enforced
    expected = {**body, **sampling, "return_token_ids": True, **forced}
    assert response.json()["echo_request"] == expected
    assert record.request == {**body, "temperature": 0.5}


def test_transient_failures_are_retried_invisibly(admin, upstreams) -> None:
    (created,) = create_rollouts(admin, prefix="flaky")
    response = call(created, "/chat/completions", chat("flaky"))
    records = admin.calls(created.id)
    assert (response.status_code, [(r.status, r.http_status) for r in records]) == (200, [(CallStatus.OK, 200)])
    assert records[0].response_token_ids == RESPONSE_IDS


@pytest.mark.parametrize("stream", [False, True])
def test_exhausted_retries_give_an_openai_error_and_an_error_record(admin, stream) -> None:
    (created,) = create_rollouts(admin, prefix="dead")
    error = error_of(call(created, "/chat/completions", chat("dead", stream=stream)), 502)
    (record,) = admin.calls(created.id)
    assert (error["code"], error["type"]) == ("upstream_unavailable", "upstream_error")
    assert (record.status, record.http_status, record.response_token_ids) == (CallStatus.ERROR, 502, [])
    assert f"after {RETRY_ATTEMPTS} tries" in record.error


def test_each_rollout_sticks_to_one_endpoint_and_rollouts_spread_over_both(admin, upstreams) -> None:
    created = create_rollouts(admin, 16, prefix="sticky")
    for rollout in created:
        for seed in range(2):
            assert call(rollout, "/chat/completions", chat("pair", seed=seed)).status_code == 200
    per_rollout = {r.id: {c.upstream for c in admin.calls(r.id)} for r in created}
    spread = Counter(next(iter(upstreams_used)) for upstreams_used in per_rollout.values())
    assert all(len(used) == 1 for used in per_rollout.values()), per_rollout
    assert set(spread) == {upstreams["pair-a"].base_url, upstreams["pair-b"].base_url}, spread


def test_an_unknown_model_among_several_is_404_model_not_found(admin) -> None:
    (created,) = create_rollouts(admin, prefix="nomodel")
    error = error_of(call(created, "/chat/completions", chat("gpt-17")), 404)
    assert (error["code"], error["param"], "policy" in error["message"], admin.calls(created.id)) == (
        "model_not_found", "model", True, [])


def test_models_lists_every_registered_name(admin) -> None:
    (created,) = create_rollouts(admin, prefix="models")
    listed = httpx.get(created.base_url + "/models", headers={"authorization": f"Bearer {created.api_key}"},
                       timeout=30).json()
    assert [m["id"] for m in listed["data"]] == ["dead", "echo", "flaky", "pair", "policy"]


def test_call_sequence_numbers_follow_arrival(admin) -> None:
    (created,) = create_rollouts(admin, prefix="seq")
    headers = [call(created, "/completions", completion()).headers["x-harnessrl-call-seq"] for _ in range(3)]
    assert (headers, [c.seq for c in admin.calls(created.id)]) == (["0", "1", "2"], [0, 1, 2])
