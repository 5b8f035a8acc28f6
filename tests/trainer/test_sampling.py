"""Sampling parameters from the gateway's record into samples: reading them, the merge rule, greedy masking."""

from __future__ import annotations

import numpy as np
import pytest

from gateway.records import CallRecord, CallStatus, Rollout
from tests.trainer.loop_support import call as call_record
from tests.trainer.loop_support import rollout as rollout_record
from trainer.recorded import recorded_calls
from trainer.samples import RecordedCall, RecordedChoice, build_samples
from trainer.sampling import PLAIN, SamplingParams, sampling_params

WARM = SamplingParams(temperature=0.7, top_p=0.9)
GREEDY = SamplingParams(temperature=0.0)


def recorded(seq, prompt, response, sampling=PLAIN, choices=()):
    logprobs = tuple(-1.0 - i / 10 for i in range(len(response)))
    return RecordedCall("r0", "g0", seq, tuple(prompt), tuple(response), logprobs, 0, True, "stop", tuple(choices),
                        sampling=sampling)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, PLAIN),
        ({}, PLAIN),
        ({"temperature": 0.7, "top_p": 0.9, "top_k": 0, "min_p": 0.0, "requested": {"temperature": 0.7},
          "enforced": False}, WARM),
        ({"temperature": 1.0, "top_k": -1}, PLAIN),
        ({"temperature": 0.5, "top_k": 20, "min_p": 0.05}, SamplingParams(0.5, 1.0, 20, 0.05)),
        ({"temperature": 0}, GREEDY),
    ],
)
def test_recorded_sampling_is_read_with_neutral_defaults(raw, expected):
    assert sampling_params(raw) == expected


@pytest.mark.parametrize("raw", [{"temperature": -1.0}, {"top_p": 0.0}, {"temperature": "hot"}, {"min_p": 2.0},
                                 {"top_k": True}])
def test_unreadable_sampling_is_refused_naming_the_field(raw):
    with pytest.raises(ValueError, match=next(iter(raw))):
        sampling_params(raw)


def test_parameters_say_greedy_filtered_and_plain():
    assert GREEDY.greedy and not WARM.greedy and SamplingParams(temperature=1e-6).greedy
    assert WARM.filtered and not WARM.plain and PLAIN.plain and not SamplingParams(temperature=0.7).plain
    assert SamplingParams(top_k=5).filtered and SamplingParams(min_p=0.1).filtered


def with_sampling(record: CallRecord, sampling: dict | None) -> CallRecord:
    data = record.model_dump()
    if sampling is None:
        data.pop("sampling", None)
    else:
        data["sampling"] = sampling
    return CallRecord.model_validate(data)


def test_records_carry_their_sampling_into_recorded_calls_and_old_records_read_as_plain():
    rollout: Rollout = rollout_record("r1", "g1")
    warm = with_sampling(call_record("r1", 0, response=(3, 4), prompt=(1, 2)),
                         {"temperature": 0.7, "top_p": 0.9, "requested": {"temperature": 0.7}})
    old = with_sampling(call_record("r1", 1, response=(6,), prompt=(1, 2, 3, 4, 5)), None)
    first, second = recorded_calls(rollout, [warm, old])
    assert first.sampling == WARM
    assert second.sampling == PLAIN
    assert warm.status == CallStatus.OK


def test_a_call_sampled_otherwise_opens_a_new_sample_counted_apart_from_merge_failures():
    calls = [recorded(0, (1, 2), (3, 4), WARM), recorded(1, (1, 2, 3, 4, 5), (6, 7), PLAIN),
             recorded(2, (1, 2, 3, 4, 5, 6, 7, 8), (9,), PLAIN), recorded(3, (1, 2, 3, 4, 10), (11,), WARM)]
    built = build_samples(calls)
    assert [(s.call_seqs, s.sampling) for s in built.samples] == [((0, 3), WARM), ((1, 2), PLAIN)]
    assert built.stats.calls_sampling_split == 1
    assert built.stats.merge_failures == 0
    assert built.stats.as_metrics()["samples/calls_sampling_split"] == 1.0


def test_same_parameters_merge_as_before():
    calls = [recorded(0, (1, 2), (3, 4), WARM), recorded(1, (1, 2, 3, 4, 5), (6, 7), WARM)]
    (sample,) = build_samples(calls).samples
    assert sample.call_seqs == (0, 1) and sample.sampling == WARM


def test_greedy_calls_are_context_masked_and_counted_in_any_sample():
    calls = [recorded(0, (1, 2), (3, 4), GREEDY), recorded(1, (1, 2, 3, 4, 5), (6, 7, 8), WARM),
             recorded(2, (1, 2, 3, 4, 5, 6, 7, 8, 9), (10,), GREEDY)]
    built = build_samples(calls)
    (sample,) = built.samples
    assert sample.sampling == WARM
    assert sample.loss_mask_T.astype(int).tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 0, 0]
    assert [(span.start, span.end, span.call_seq) for span in sample.spans] == [(5, 8, 1)]
    assert built.stats.greedy_tokens_masked == 3
    assert built.stats.as_metrics()["samples/greedy_tokens_masked"] == 3.0
    assert np.count_nonzero(sample.logprobs_T) == 3


def test_a_rollout_of_greedy_calls_only_leaves_no_sample():
    calls = [recorded(0, (1, 2), (3, 4), GREEDY, choices=(RecordedChoice(1, (), (5,), (-0.5,), "stop"),))]
    built = build_samples(calls)
    assert built.samples == ()
    assert built.stats.greedy_tokens_masked == 3


def test_a_verl_update_takes_its_samples_temperature_and_refuses_mixed_or_filtered():
    from trainer.backends.verl_batch import verl_temperature

    def samples(*params):
        return build_samples([recorded(i, (1, 2, 10 * i), (3,), p) for i, p in enumerate(params)]).samples

    cool = SamplingParams(temperature=0.7)
    assert verl_temperature(samples(cool, cool)) == 0.7
    assert verl_temperature(samples(cool, GREEDY)) == 0.7
    assert verl_temperature(()) == 1.0
    with pytest.raises(ValueError, match="sampling.train: enforce"):
        verl_temperature(samples(cool, PLAIN))
    with pytest.raises(ValueError, match="top_p=0.9"):
        verl_temperature(samples(WARM))


@pytest.mark.parametrize(
    ("raw", "penalized"),
    [
        ({"requested": {"frequency_penalty": 0.5}, "enforced": False}, True),
        ({"requested": {"logit_bias": {"42": 5}}}, True),
        ({"requested": {"repetition_penalty": 1.1, "temperature": 0.7}, "temperature": 0.7}, True),
        ({"requested": {"frequency_penalty": 0.5}, "enforced": True}, False),
        ({"requested": {"frequency_penalty": 0, "presence_penalty": 0.0, "repetition_penalty": 1.0}}, False),
        ({"requested": {"temperature": 0.7}, "temperature": 0.7}, False),
        # a constraining response_format (a grammar on vLLM) that reached the engine; the gateway records none for text
        ({"requested": {"response_format": {"type": "json_object"}}}, True),
        ({"requested": {"response_format": {"type": "json_schema", "json_schema": {"name": "a"}}}}, True),
        ({"requested": {"response_format": {"type": "json_object"}}, "enforced": True}, False),
        ({"requested": {"response_format": {"type": "text"}}}, False),
        # dropped fields' names are recorded, not masked
        ({"requested": {"dropped": ["metadata", "user"]}}, False),
        # a forcing tool_choice the engine forced in the prompt (the embedded engine reports the opening's tokens:
        # the response holds only what it sampled) is trained, enforced or not
        ({"requested": {"tool_choice": "required"}, "forced_prompt_tokens": 20}, False),
        ({"requested": {"tool_choice": {"type": "function", "function": {"name": "f"}}}, "forced_prompt_tokens": 9,
          "enforced": True}, False),
        # one the engine enforced with a grammar over the response (vLLM: no forced_prompt_tokens; its logprobs are
        # the masked distribution's) is masked, even when the gateway enforced the policy's sampling
        ({"requested": {"tool_choice": "required"}}, True),
        ({"requested": {"tool_choice": {"type": "function", "function": {"name": "f"}}}, "enforced": True}, True),
        ({"requested": {"tool_choice": "required"}, "forced_prompt_tokens": None}, True),
    ],
)
def test_penalties_that_reached_the_engine_make_a_call_untrainable(raw, penalized):
    params = sampling_params(raw)
    assert params.penalized is penalized and params.trainable is not penalized


def test_penalised_calls_are_context_masked_and_counted_apart_from_greedy_ones():
    penalized = sampling_params({"temperature": 0.7, "top_p": 0.9, "requested": {"presence_penalty": 1.0}})
    calls = [recorded(0, (1, 2), (3, 4), WARM), recorded(1, (1, 2, 3, 4, 5), (6, 7, 8), penalized),
             recorded(2, (1, 2, 3, 4, 5, 6, 7, 8, 9), (10,), WARM)]
    built = build_samples(calls)
    (sample,) = built.samples
    assert sample.sampling == WARM and sample.call_seqs == (0, 1, 2)
    assert sample.loss_mask_T.astype(int).tolist() == [0, 0, 1, 1, 0, 0, 0, 0, 0, 1]
    assert built.stats.penalized_tokens_masked == 3 and built.stats.greedy_tokens_masked == 0


def test_the_removed_verl_temperature_setting_is_refused_naming_the_fix():
    from trainer.backends.verl import VerlBackendConfig

    with pytest.raises(ValueError, match="backend.verl.temperature.*sampling.temperature"):
        VerlBackendConfig(model_path="m", temperature=1.0)
    assert VerlBackendConfig(model_path="m").temperature is None
