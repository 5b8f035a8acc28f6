"""Token-prefix merging of recorded calls into samples: table cases, limits, errors, properties."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.samples import RecordedCall, SampleLimits, build_samples


def make_call(
    seq: int,
    prompt: tuple[int, ...],
    response: tuple[int, ...],
    *,
    rollout_id: str = "r0",
    group_id: str = "g0",
    version: int = 0,
    ok: bool = True,
) -> RecordedCall:
    """A recorded call whose logprobs encode (seq, position), so every token is recognisable."""
    logprobs = tuple(-(seq + 1) - i / 100 for i in range(len(response)))
    return RecordedCall(
        rollout_id=rollout_id,
        group_id=group_id,
        seq=seq,
        prompt_token_ids=prompt,
        response_token_ids=response,
        response_logprobs=logprobs,
        policy_version=version,
        ok=ok,
        finish_reason="stop" if ok else None,
    )


def test_three_turn_conversation_merges_into_one_sample_with_exact_mask():
    calls = [
        make_call(0, (1, 2), (3, 4), version=5),
        make_call(1, (1, 2, 3, 4, 9), (5,), version=6),
        make_call(2, (1, 2, 3, 4, 9, 5, 8, 8), (6, 7), version=6),
    ]
    batch = build_samples(calls)
    (sample,) = batch.samples
    assert sample.token_ids_T.tolist() == [1, 2, 3, 4, 9, 5, 8, 8, 6, 7]
    assert sample.loss_mask_T.astype(int).tolist() == [0, 0, 1, 1, 0, 1, 0, 0, 1, 1]
    assert sample.policy_versions_T.tolist() == [-1, -1, 5, 5, -1, 6, -1, -1, 6, 6]
    assert sample.logprobs_T.tolist() == pytest.approx([0, 0, -1, -1.01, 0, -2, 0, 0, -3, -3.01])
    assert sample.call_seqs == (0, 1, 2)
    assert (sample.rollout_id, sample.group_id) == ("r0", "g0")
    assert batch.stats.calls_merged == 2 and batch.stats.single_sample_rollouts == 1
    assert batch.stats.trainable_tokens == 5 and batch.stats.tokens == 10


def test_sample_arrays_are_read_only():
    (sample,) = build_samples([make_call(0, (1,), (2,))]).samples
    with pytest.raises(ValueError):
        sample.loss_mask_T[0] = True


def test_interleaved_subagent_calls_merge_into_their_own_branches():
    calls = [
        make_call(0, (1, 2), (3,)),  # main agent
        make_call(1, (7, 7), (8,)),  # subagent starts: new sample
        make_call(2, (1, 2, 3, 4), (5,)),  # main agent again
        make_call(3, (7, 7, 8, 6), (9,)),  # subagent again
        make_call(4, (1, 2, 3, 4, 5, 6), (0,)),
    ]
    batch = build_samples(calls)
    assert [s.call_seqs for s in batch.samples] == [(0, 2, 4), (1, 3)]
    assert batch.stats.merge_failures_other == 1
    assert batch.stats.samples_per_rollout_max == 2
    assert batch.stats.as_metrics()["samples/single_sample_rollout_share"] == 0.0


def test_longest_matching_branch_wins():
    calls = [
        make_call(0, (1,), (2,)),
        make_call(1, (5,), (6,)),
        make_call(2, (1, 2, 3), (4,)),  # extends branch (1, 2)
        make_call(3, (1, 2, 3, 4, 0), (9,)),  # matches (1,2) and (1,2,3,4): the longer wins
    ]
    batch = build_samples(calls)
    assert [s.call_seqs for s in batch.samples] == [(0, 2, 3), (1,)]


def test_compaction_starts_a_new_sample_classified_other_without_decoder():
    calls = [make_call(0, (1, 2), (3,)), make_call(1, (1, 2, 3, 4), (5,)), make_call(2, (1, 9), (6,))]
    batch = build_samples(calls)
    assert [s.call_seqs for s in batch.samples] == [(0, 1), (2,)]
    stats = batch.stats
    assert stats.merge_failures_other == stats.merge_failures == 1


FAKE_VOCAB = {1: "<s>", 2: "he", 3: "llo", 4: "hello", 5: " world", 6: "<think>x</think>", 7: "Q", 8: "A"}


def fake_decode(token_ids) -> str:
    return "".join(FAKE_VOCAB[t] for t in token_ids)


@pytest.mark.parametrize(
    ("second_prompt", "kind"),
    [
        ((1, 7, 6, 4, 5), "retokenization"),  # "he" + "llo" re-encoded as one "hello" token
        ((1, 7, 8, 5), "template"),  # same head "<s>Q", reasoning dropped from the earlier reply
        ((7, 7, 8), "other"),  # head "<s>Q" gone: a new conversation
    ],
)
def test_merge_failures_are_classified_with_a_decoder(second_prompt, kind):
    calls = [make_call(0, (1, 7), (6, 2, 3)), make_call(1, second_prompt, (5,))]
    stats = build_samples(calls, decode=fake_decode).stats
    counts = {
        "retokenization": stats.merge_failures_retokenization,
        "template": stats.merge_failures_template,
        "other": stats.merge_failures_other,
    }
    assert counts == {name: int(name == kind) for name in counts}
    assert stats.samples == 2


def test_failed_and_empty_calls_are_skipped_and_counted():
    calls = [
        make_call(0, (1,), (2,)),
        make_call(1, (1, 2, 3), (4,), ok=False),
        make_call(2, (1, 2, 3), ()),
        make_call(3, (1, 2, 3), (5,)),
    ]
    batch = build_samples(calls)
    assert [s.call_seqs for s in batch.samples] == [(0, 3)]
    assert (batch.stats.calls_failed, batch.stats.calls_empty, batch.stats.calls) == (1, 1, 4)


def test_calls_are_ordered_by_seq_and_grouped_by_rollout():
    calls = [
        make_call(1, (1, 2, 3), (4,), rollout_id="a"),
        make_call(0, (5,), (6,), rollout_id="b"),
        make_call(0, (1, 2), (3,), rollout_id="a"),
    ]
    batch = build_samples(calls)
    assert [(s.rollout_id, s.call_seqs) for s in batch.samples] == [("a", (0, 1)), ("b", (0,))]
    assert batch.stats.rollouts == 2


def test_truncated_response_keeps_merging_with_its_tail_as_observation():
    calls = [make_call(0, (1,), (2, 3, 4)), make_call(1, (1, 2, 3, 4, 5), (6, 7, 8))]
    batch = build_samples(calls, limits=SampleLimits(max_response_tokens=2))
    (sample,) = batch.samples
    assert sample.token_ids_T.tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert sample.loss_mask_T.astype(int).tolist() == [0, 1, 1, 0, 0, 1, 1]
    assert batch.stats.responses_truncated == 2


def test_dropped_response_is_not_trained_and_next_call_still_merges():
    calls = [
        make_call(0, (1,), (2,)),
        make_call(1, (1, 2, 3), (4, 4, 4)),
        make_call(2, (1, 2, 3, 4, 4, 4), (5,)),
    ]
    batch = build_samples(calls, limits=SampleLimits(max_response_tokens=2, overflow="drop"))
    assert [s.call_seqs for s in batch.samples] == [(0, 2)]
    assert batch.stats.responses_dropped == 1


def test_prompt_limit_truncates_from_the_left_into_a_new_sample_or_drops():
    calls = [make_call(0, (1, 2), (3,)), make_call(1, (1, 2, 3, 4), (5,))]
    truncated = build_samples(calls, limits=SampleLimits(max_prompt_tokens=3, prompt_overflow="truncate"))
    assert [s.token_ids_T.tolist() for s in truncated.samples] == [[1, 2, 3], [2, 3, 4, 5]]
    assert truncated.stats.prompts_truncated == 1
    assert truncated.stats.merge_failures_other == 0
    dropped = build_samples(calls, limits=SampleLimits(max_prompt_tokens=3))
    assert [s.call_seqs for s in dropped.samples] == [(0,)] and dropped.stats.prompts_dropped == 1


@pytest.mark.parametrize(
    ("calls", "message"),
    [
        ([make_call(0, (1,), (2,)), make_call(0, (1, 2), (3,))], "two calls with seq=0"),
        ([make_call(0, (1,), (2,)), make_call(1, (1, 2), (3,), group_id="g1")], "exactly one group"),
        ([RecordedCall("r", "g", 0, (1,), (2, 3), (-1.0,), 0, True, "stop")], "1 logprobs for 2"),
    ],
)
def test_inconsistent_calls_are_rejected_with_the_offending_value(calls, message):
    with pytest.raises(ValueError, match=message):
        build_samples(calls)


@pytest.mark.parametrize(
    "limits", [{"max_prompt_tokens": 0}, {"max_response_tokens": -1}, {"overflow": "cut"}]
)
def test_invalid_limits_are_rejected(limits):
    with pytest.raises(ValueError, match="SampleLimits"):
        SampleLimits(**limits)


@st.composite
def rollout_scripts(draw):
    """Calls of one rollout: continued threads, forks, fresh prompts, mangled contexts, failures."""
    tokens = st.integers(0, 3)  # a tiny vocabulary makes accidental prefix matches common
    threads: list[tuple[int, ...]] = []
    calls = []
    for seq in range(draw(st.integers(1, 12))):
        op = draw(st.sampled_from(["continue", "continue", "new", "fork", "mangle", "fail"]))
        obs = tuple(draw(st.lists(tokens, max_size=3)))
        if op in ("continue", "fork", "mangle") and threads:
            k = draw(st.integers(0, len(threads) - 1))
            base = threads[k]
            if op == "fork":
                base = base[: draw(st.integers(0, len(base)))]
            elif op == "mangle" and base:
                base = base[:-1] + ((base[-1] + 1) % 4,)
        else:
            k, base = None, ()
        prompt = base + obs if base + obs else (0,)
        response = tuple(draw(st.lists(tokens, min_size=1, max_size=4)))
        calls.append(make_call(seq, prompt, response, version=seq % 3, ok=op != "fail"))
        if op == "continue" and k is not None:
            threads[k] = prompt + response
        elif op != "fail":
            threads.append(prompt + response)
    return calls


@settings(max_examples=150, deadline=None)
@given(rollout_scripts(), st.randoms(use_true_random=False))
def test_every_trainable_token_appears_exactly_once_with_its_logprob(calls, rng):
    shuffled = list(calls)
    rng.shuffle(shuffled)
    batch = build_samples(shuffled)
    by_seq = {call.seq: call for call in calls}
    seen = [span.call_seq for sample in batch.samples for span in sample.spans]
    assert sorted(seen) == [call.seq for call in calls if call.ok]
    for sample in batch.samples:
        tokens = sample.token_ids_T.tolist()
        for span in sample.spans:
            call = by_seq[span.call_seq]
            assert tuple(tokens[: span.start]) == call.prompt_token_ids  # the context the engine saw
            assert tuple(tokens[span.start : span.end]) == call.response_token_ids
            np.testing.assert_array_equal(
                sample.logprobs_T[span.start : span.end], np.asarray(call.response_logprobs, dtype=np.float32)
            )
            assert set(sample.policy_versions_T[span.start : span.end].tolist()) == {call.policy_version}
        assert sample.num_tokens == sample.spans[-1].end
    stats = batch.stats
    assert stats.samples + stats.calls_merged == sum(call.ok for call in calls)
    assert stats.merge_failures == stats.samples - stats.rollouts_with_samples


@settings(max_examples=150, deadline=None)
@given(rollout_scripts())
def test_mask_is_one_exactly_on_sampled_tokens(calls):
    batch = build_samples(calls)
    for sample in batch.samples:
        expected_T = np.zeros(sample.num_tokens, dtype=bool)
        for span in sample.spans:
            expected_T[span.start : span.end] = True
        np.testing.assert_array_equal(sample.loss_mask_T, expected_T)
        np.testing.assert_array_equal(sample.policy_versions_T >= 0, expected_T)
        assert not sample.logprobs_T[~expected_T].any()
    assert batch.stats.trainable_tokens == sum(len(c.response_token_ids) for c in calls if c.ok)


def test_shuffled_rollouts_give_the_same_samples():
    rng = random.Random(0)
    calls = [make_call(i, tuple(range(i + 1)), (i + 1,), rollout_id=f"r{i % 3}") for i in range(9)]
    reference = build_samples(calls)
    rng.shuffle(calls)
    shuffled = build_samples(calls)
    assert sorted((s.rollout_id, s.call_seqs) for s in shuffled.samples) == sorted(
        (s.rollout_id, s.call_seqs) for s in reference.samples
    )


def test_calls_prompted_with_recorded_tokens_are_counted():
    """The gateway's recorded turns (`CallRecord.recorded_prefix`): counted, and their share of the calls."""
    from dataclasses import replace

    first = make_call(0, (1, 2), (3, 4))
    second = replace(make_call(1, (1, 2, 3, 4, 5), (6,)), recorded_prefix=4)
    third = make_call(2, (1, 2, 3, 4, 5, 6, 7), (8,))
    stats = build_samples([first, second, third]).stats
    assert (stats.samples, stats.calls_recorded_tokens) == (1, 1)
    assert stats.as_metrics()["samples/recorded_tokens_call_share"] == pytest.approx(1 / 3)
