"""The sampling policy as pure functions: what is forwarded and recorded for a body, by mode and policy; the config."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.config import GatewayConfig
from gateway.errors import BadRequest
from gateway.records import RolloutMode, SamplingRecord
from gateway.sampling import (
    SamplingMode,
    SamplingPolicy,
    apply_policy,
    call_seed,
    requested_sampling,
    seed_record,
    seeded_body,
)

BODY = {"messages": [], "n": 3, "stream": True, "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.1,
        "repetition_penalty": 1.2, "seed": 5}
ASKED = {"temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.1, "repetition_penalty": 1.2, "seed": 5}


def test_the_policys_own_temperature_is_enforced_on_train_calls_only() -> None:
    policy = SamplingPolicy(temperature=0.8)
    sent, record = apply_policy(BODY, requested_sampling(BODY), RolloutMode.TRAIN, policy)
    assert sent == {"messages": [], "n": 3, "stream": True, "seed": 5, "temperature": 0.8, "top_p": 1.0, "top_k": 0,
                    "min_p": 0.0}
    assert record == SamplingRecord(temperature=0.8, requested=ASKED, enforced=True, seed=5)  # the harness's seed
    sent, record = apply_policy(BODY, requested_sampling(BODY), RolloutMode.VAL, policy)
    assert sent == BODY and record == SamplingRecord(temperature=0.7, top_p=0.9, top_k=40, min_p=0.1,
                                                     requested=ASKED, seed=5)
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


def test_a_seeded_rollouts_calls_get_the_gateways_seed_whatever_the_harness_sent() -> None:
    sent, record = apply_policy(BODY, requested_sampling(BODY), RolloutMode.VAL, SamplingPolicy())
    seeded = seed_record(record, 1234, seq=2)
    assert seeded.seed == call_seed(1234, 2) != 5 and seeded.requested["seed"] == 5
    assert seeded.model_copy(update={"seed": 5}) == record, "only the seed changes"
    assert seeded_body(sent, seeded) == {**BODY, "seed": call_seed(1234, 2)}
    assert seed_record(record, None, seq=2) is record, "an unseeded rollout keeps the harness's seed"
    assert seeded_body(BODY, None) is BODY, "a call that samples nothing is left as it is"


def test_call_seeds_are_deterministic_distinct_and_fit_every_engine() -> None:
    seeds = {(rollout, seq): call_seed(rollout, seq) for rollout in (0, 1, 2**63 - 1) for seq in range(50)}
    assert seeds == {(rollout, seq): call_seed(rollout, seq) for rollout, seq in seeds}
    assert len(set(seeds.values())) == len(seeds)
    assert all(0 <= seed < 2**31 for seed in seeds.values())
