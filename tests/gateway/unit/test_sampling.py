"""The sampling policy as pure functions: what is forwarded and recorded for a body, by mode and policy; the config."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.config import GatewayConfig
from gateway.errors import BadRequest
from gateway.records import RolloutMode, SamplingRecord
from gateway.sampling import SamplingMode, SamplingPolicy, apply_policy, requested_sampling

BODY = {"messages": [], "n": 3, "stream": True, "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.1,
        "repetition_penalty": 1.2, "seed": 5}
ASKED = {"temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.1, "repetition_penalty": 1.2}


def test_the_policys_own_temperature_is_enforced_on_train_calls_only() -> None:
    policy = SamplingPolicy(temperature=0.8)
    sent, record = apply_policy(BODY, requested_sampling(BODY), RolloutMode.TRAIN, policy)
    assert sent == {"messages": [], "n": 3, "stream": True, "seed": 5, "temperature": 0.8, "top_p": 1.0, "top_k": 0,
                    "min_p": 0.0}
    assert record == SamplingRecord(temperature=0.8, requested=ASKED, enforced=True)
    sent, record = apply_policy(BODY, requested_sampling(BODY), RolloutMode.VAL, policy)
    assert sent == BODY and record == SamplingRecord(temperature=0.7, top_p=0.9, top_k=40, min_p=0.1,
                                                     requested=ASKED)
    assert BODY["temperature"] == 0.7, "the harness's body is not changed in place"


def test_null_fields_count_as_not_sent() -> None:
    body = {"temperature": None, "top_p": 0.5}
    sent, record = apply_policy(body, requested_sampling(body), RolloutMode.TRAIN,
                                SamplingPolicy(train=SamplingMode.RECORD))
    assert (sent["temperature"], record.temperature, record.top_p, record.requested) == (1.0, 1.0, 0.5,
                                                                                          {"top_p": 0.5})


def test_the_config_takes_the_policy_and_refuses_unknown_modes_and_temperatures() -> None:
    assert GatewayConfig().sampling == SamplingPolicy(train=SamplingMode.ENFORCE, temperature=1.0)
    assert GatewayConfig(sampling={"train": "record"}).sampling.train == SamplingMode.RECORD
    for bad in ({"train": "ignore"}, {"temperature": 0}, {"top_p": 0.9}):
        with pytest.raises(ValidationError):
            GatewayConfig(sampling=bad)
    with pytest.raises(BadRequest, match="'min_p' must be a number"):
        apply_policy({}, {"min_p": "0.1"}, RolloutMode.TRAIN, SamplingPolicy())


@pytest.mark.parametrize("n", [0, -1, 1025, 10**30, 2.5, 1025.0, True, "3", [1]])
def test_more_choices_than_the_gateway_records_are_refused_before_the_engine(n) -> None:
    """n past MAX_CHOICES came back as an answer off the protocol: a failure the harness chose, now a 400. A whole
    number written 2.0 is JSON's integer 2 (as the OpenAPI schema's `integer` takes it)."""
    with pytest.raises(BadRequest) as refused:
        apply_policy({**BODY, "n": n}, requested_sampling(BODY), RolloutMode.TRAIN, SamplingPolicy())
    assert refused.value.param == "n"
    for ok in (1, 1024, 2.0, None):
        apply_policy({**BODY, "n": ok}, requested_sampling(BODY), RolloutMode.TRAIN, SamplingPolicy())
