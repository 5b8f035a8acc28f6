"""Every call records its sampling, and train calls sample at the policy's parameters unless the gateway is told to
record the harness's (issue 14, point 2): chat, completions, Anthropic Messages and Responses, unary and streamed,
n > 1; val calls always sample as the harness asks; what the engine was sent is what the record says it applied."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from gateway.client import GatewayClient
from gateway.records import CallStatus, RolloutMode, SamplingRecord
from gateway.sampling import call_seed
from tests.gateway.api_support import chat, completion, create_rollouts, current_key, error_of, write_config
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway

ASKED = {"temperature": 0.7, "top_p": 0.9}


def messages(**extra: Any) -> dict[str, Any]:
    return {"model": "policy", "max_tokens": 8, "messages": [{"role": "user", "content": "hello"}], **extra}


def responses(**extra: Any) -> dict[str, Any]:
    return {"model": "policy", "input": "hello", **extra}


CASES = {  # path under /v1, the harness's body, the fields it asked for
    "chat": ("/chat/completions", chat(**ASKED, top_k=20, min_p=0.05), {**ASKED, "top_k": 20, "min_p": 0.05}),
    "chat stream": ("/chat/completions", chat(**ASKED, stream=True), ASKED),
    "chat n=2": ("/chat/completions", chat(**ASKED, n=2), ASKED),
    "completion": ("/completions", completion(**ASKED, top_k=20), {**ASKED, "top_k": 20}),
    "messages": ("/messages", messages(**ASKED, top_k=20), {**ASKED, "top_k": 20}),
    "messages stream": ("/messages", messages(**ASKED, stream=True), ASKED),
    "responses": ("/responses", responses(**ASKED), ASKED),
    "responses stream": ("/responses", responses(**ASKED, stream=True), ASKED),
}
POLICY = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0}


def start_gateway(tmp_path_factory, scripted, **config: Any):
    path = write_config(tmp_path_factory.mktemp("cfg") / "gateway.yaml", **config)
    gateway = InProcessGateway(db_path=tmp_path_factory.mktemp("gw") / "store.db", config_path=path).start()
    with GatewayClient(gateway.url, ADMIN_TOKEN) as client:
        client.register_model("policy", scripted.base_url, version=1)
    return gateway


@pytest.fixture(scope="module")
def enforcing(tmp_path_factory, scripted):
    """A gateway with the default policy (train calls enforced at temperature 1)."""
    gateway = start_gateway(tmp_path_factory, scripted)
    with GatewayClient(gateway.url, ADMIN_TOKEN) as client:
        yield client
    gateway.stop()


@pytest.fixture(scope="module")
def recording(tmp_path_factory, scripted):
    """A gateway told to record the harness's sampling on train calls."""
    gateway = start_gateway(tmp_path_factory, scripted, sampling={"train": "record"})
    with GatewayClient(gateway.url, ADMIN_TOKEN) as client:
        yield client
    gateway.stop()


def post(admin: GatewayClient, path: str, body: dict[str, Any], mode: RolloutMode = RolloutMode.TRAIN,
         status: int = 200) -> tuple[httpx.Response, list]:
    (created,) = create_rollouts(admin, prefix="sampling", mode=mode)
    response = httpx.post(created.base_url + path, json=body, timeout=30,
                          headers={"authorization": f"Bearer {created.api_key}"})
    assert response.status_code == status, response.text
    return response, admin.calls(created.id)


def forwarded(scripted) -> dict[str, Any]:
    """The body the engine got for the latest call."""
    path, body = scripted.upstream.last_request
    assert path.endswith(("/chat/completions", "/completions")), path
    return orjson.loads(body)


def engine_sampling(body: dict[str, Any]) -> dict[str, Any]:
    return {key: body.get(key) for key in POLICY}


@pytest.mark.parametrize(("path", "body", "asked"), CASES.values(), ids=CASES.keys())
def test_train_calls_sample_at_the_policys_parameters_and_keep_the_harnesss_as_requested(
        enforcing, scripted, path, body, asked) -> None:
    _, (record,) = post(enforcing, path, body)
    sent = forwarded(scripted)
    assert engine_sampling(sent) == POLICY
    assert (sent.get("n", 1), sent.get("stream", False)) == (body.get("n", 1), body.get("stream", False))
    assert (record.status, record.stream) == (CallStatus.OK, body.get("stream", False))
    assert record.sampling == SamplingRecord(**POLICY, requested=asked, enforced=True)
    assert record.request == body  # the harness's own request is recorded as it sent it


@pytest.mark.parametrize(("path", "body", "asked"), CASES.values(), ids=CASES.keys())
def test_in_record_mode_the_harnesss_values_are_forwarded_and_recorded(recording, scripted, path, body,
                                                                       asked) -> None:
    _, (record,) = post(recording, path, body)
    applied = {**POLICY, **asked}
    assert engine_sampling(forwarded(scripted)) == applied  # what it did not send goes as its neutral value
    assert record.sampling == SamplingRecord(**applied, requested=asked, enforced=False)


@pytest.mark.parametrize(("path", "body", "asked"), [CASES["chat"], CASES["messages stream"]], ids=["chat",
                                                                                                    "messages"])
def test_val_calls_always_sample_as_the_harness_asks(enforcing, scripted, path, body, asked) -> None:
    _, (record,) = post(enforcing, path, body, mode=RolloutMode.VAL)
    assert engine_sampling(forwarded(scripted)) == {**POLICY, **asked}
    assert record.sampling == SamplingRecord(**{**POLICY, **asked}, requested=asked, enforced=False)


def test_a_harness_that_sends_no_sampling_has_an_empty_request_and_neutral_values(enforcing, recording,
                                                                                  scripted) -> None:
    for admin, enforced in ((enforcing, True), (recording, False)):
        _, (record,) = post(admin, "/chat/completions", chat())
        assert engine_sampling(forwarded(scripted)) == POLICY
        assert record.sampling == SamplingRecord(requested={}, enforced=enforced)


def test_greedy_and_top_k_minus_one_are_recorded_as_the_engine_applies_them(recording, scripted) -> None:
    asked = {"temperature": 0, "top_p": 0.5, "top_k": -1}
    _, (record,) = post(recording, "/chat/completions", chat(**asked))
    assert engine_sampling(forwarded(scripted)) == {**asked, "min_p": 0.0}
    assert record.sampling == SamplingRecord(temperature=0.0, top_p=1.0, top_k=0, min_p=0.0, requested=asked)
    _, (record,) = post(recording, "/completions", completion(temperature=0.5, top_k=-1))
    assert (record.sampling.temperature, record.sampling.top_k) == (0.5, 0)


def test_penalties_are_removed_when_enforced_and_forwarded_when_recorded(enforcing, recording, scripted) -> None:
    penalties = {"presence_penalty": 0.5, "frequency_penalty": 0.25, "logit_bias": {"5": -100}}
    _, (record,) = post(enforcing, "/chat/completions", chat(**penalties))
    assert not set(penalties) & set(forwarded(scripted))
    assert record.sampling.requested == penalties and record.sampling.enforced
    _, (record,) = post(recording, "/chat/completions", chat(**penalties))
    assert {key: forwarded(scripted).get(key) for key in penalties} == penalties
    assert record.sampling.requested == penalties and not record.sampling.enforced


@pytest.mark.parametrize(("field", "value"), [("temperature", "hot"), ("top_p", True), ("top_k", 2.5),
                                             ("temperature", -0.5)])
def test_a_sampling_field_that_is_not_a_number_is_refused_naming_it_and_nothing_is_recorded(
        enforcing, field, value) -> None:
    response, calls = post(enforcing, "/chat/completions", chat(**{field: value}), status=400)
    assert error_of(response, 400)["param"] == field
    assert calls == []


def test_count_tokens_samples_nothing(enforcing) -> None:
    _, (record,) = post(enforcing, "/messages/count_tokens", messages(temperature=0.3))
    assert record.kind == "count_tokens" and record.sampling is None


@pytest.mark.parametrize(("path", "body"), [(CASES["chat"][0], chat(seed=5)), (CASES["messages stream"][0],
                                                                                 CASES["messages stream"][1])],
                         ids=["chat", "messages"])
def test_a_seeded_rollouts_calls_sample_with_the_gateways_seed_numbered_by_call(enforcing, scripted, path,
                                                                                 body) -> None:
    """Seeded validation (issue 28 point 2): the engine gets call_seed(rollout seed, seq) whatever the harness sent,
    the record says so, and a re-created spec with the same seed is the same rollout (the controller's key)."""
    (created,) = create_rollouts(enforcing, prefix="seeded", mode=RolloutMode.VAL, sampling_seed=77)
    sent = []
    for _ in range(2):
        response = httpx.post(created.base_url + path, json=body, timeout=30,
                              headers={"authorization": f"Bearer {created.api_key}"})
        assert response.status_code == 200, response.text
        sent.append(forwarded(scripted)["seed"])
    records = enforcing.calls(created.id)
    assert sent == [call_seed(77, 0), call_seed(77, 1)] == [r.sampling.seed for r in records]
    assert records[0].sampling.requested.get("seed") == body.get("seed")
    rollout = enforcing.get_rollout(created.id)
    assert rollout.sampling_seed == 77 and current_key(enforcing, created.id).created is False


def test_an_unseeded_rollout_records_the_harnesss_own_seed(enforcing, scripted) -> None:
    _, (record,) = post(enforcing, "/chat/completions", chat(seed=9), mode=RolloutMode.VAL)
    assert forwarded(scripted)["seed"] == 9 and record.sampling.seed == 9
