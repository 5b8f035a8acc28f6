"""Side calls skipped or included by configuration, and the choices after the first of an `n` > 1 answer as samples
of their own that later calls still merge into by token prefix (issue 13, points 2 and 3)."""

from __future__ import annotations

import numpy as np
import pytest

from gateway.records import CallRecord, CallStatus, ChoiceRecord
from tests.trainer.test_recorded import make_record
from tests.trainer.test_samples import make_call
from trainer.recorded import to_recorded_call
from trainer.samples import RecordedCall, RecordedChoice, SampleLimits, build_samples


def side(call: RecordedCall) -> RecordedCall:
    return RecordedCall(**{**vars(call), "side": True})


def with_choices(call: RecordedCall, *responses: tuple[int, ...]) -> RecordedCall:
    choices = tuple(RecordedChoice(i, (), r, tuple(-0.5 - i / 10 for _ in r), "stop")
                    for i, r in enumerate(responses, start=1))
    return RecordedCall(**{**vars(call), "extra_choices": choices})


MAIN_WITH_A_TITLE_CALL = [
    make_call(0, (1, 2), (3,)),
    side(make_call(1, (50, 51), (52, 53))),  # a small-model call for the session's title
    make_call(2, (1, 2, 3, 4), (5,)),
]


@pytest.mark.parametrize(("side_calls", "samples", "skipped", "merge_failures"), [
    ("skip", [(0, 2)], 1, 0),
    ("include", [(0, 2), (1,)], 0, 1),
])
def test_side_calls_are_skipped_and_counted_or_included(side_calls, samples, skipped, merge_failures) -> None:
    built = build_samples(MAIN_WITH_A_TITLE_CALL, limits=SampleLimits(side_calls=side_calls))
    assert [s.call_seqs for s in built.samples] == samples
    metrics = built.stats.as_metrics()
    assert (metrics["samples/calls_side_skipped"], metrics["samples/merge_failures"]) == (skipped, merge_failures)
    assert metrics["samples/calls"] == 3


def test_side_calls_are_skipped_by_default() -> None:
    assert SampleLimits().side_calls == "skip"
    assert build_samples(MAIN_WITH_A_TITLE_CALL).stats.calls_side_skipped == 1


@pytest.mark.parametrize("continued", [0, 1])
def test_each_choice_is_a_sample_and_the_continued_one_keeps_merging(continued: int) -> None:
    first = with_choices(make_call(0, (1, 2), (3, 4)), (7, 8, 9))
    responses = [(3, 4), (7, 8, 9)]
    follow_up = make_call(1, (1, 2, *responses[continued], 6), (5,))
    built = build_samples([first, follow_up])
    assert built.stats.merge_failures == 0 and built.stats.extra_choices_included == 1
    by_choice = {s.spans[0].choice: s for s in built.samples}
    assert set(by_choice) == {0, 1}
    grown, alone = by_choice[continued], by_choice[1 - continued]
    assert grown.call_seqs == (0, 1) and alone.call_seqs == (0,)
    assert grown.token_ids_T.tolist() == [1, 2, *responses[continued], 6, 5]
    assert alone.token_ids_T.tolist() == [1, 2, *responses[1 - continued]]
    second = by_choice[1]
    assert second.loss_mask_T.astype(int).tolist()[:5] == [0, 0, 1, 1, 1]
    assert second.logprobs_T[2:5].tolist() == pytest.approx([-0.6] * 3)
    assert int(sum(s.num_trainable_tokens for s in built.samples)) == 2 + 3 + 1  # no token trained twice


def test_an_extra_choice_is_trained_on_its_own_prompt_without_the_history() -> None:
    calls = [make_call(0, (1, 2), (3,)), with_choices(make_call(1, (1, 2, 3, 4), (5,)), (6,))]
    built = build_samples(calls)
    history, extra = built.samples
    assert history.call_seqs == (0, 1) and history.num_trainable_tokens == 2
    assert extra.token_ids_T.tolist() == [1, 2, 3, 4, 6]
    assert extra.loss_mask_T.astype(int).tolist() == [0, 0, 0, 0, 1]  # call 0's response is observation here


def test_extra_choices_skipped_by_configuration_are_counted() -> None:
    first = with_choices(make_call(0, (1, 2), (3,)), (7,), ())
    built = build_samples([first], limits=SampleLimits(extra_choices="skip"))
    assert [s.call_seqs for s in built.samples] == [(0,)]
    assert (built.stats.extra_choices_included, built.stats.extra_choices_skipped) == (0, 2)
    included = build_samples([first])
    assert (included.stats.extra_choices_included, included.stats.extra_choices_skipped) == (1, 1)  # one is empty


def test_extra_choices_obey_the_length_limits() -> None:
    first = with_choices(make_call(0, (1, 2), (3,)), (7, 8, 9))
    built = build_samples([first], limits=SampleLimits(max_response_tokens=2))
    assert [s.token_ids_T.tolist() for s in built.samples] == [[1, 2, 3], [1, 2, 7, 8]]
    assert built.stats.responses_truncated == 1


def test_a_choice_with_a_logprob_per_token_missing_is_refused() -> None:
    call = make_call(0, (1,), (2,))
    broken = RecordedCall(**{**vars(call), "extra_choices": (RecordedChoice(1, (), (3, 4), (-0.1,), "stop"),)})
    with pytest.raises(ValueError, match="choice 1"):
        build_samples([broken])


def record_with(**fields) -> CallRecord:
    return make_record(0, [1, 2], [3]).model_copy(update=fields)


def test_a_records_choices_and_side_mark_reach_the_trainer() -> None:
    record = record_with(n_choices=2, side=True, extra_choices=[ChoiceRecord(
        index=1, response_token_ids=[7, 8], response_logprobs=[-0.25, -0.5], finish_reason="length")])
    call = to_recorded_call(record, "g")
    assert call.side
    assert call.extra_choices == (RecordedChoice(1, (), (7, 8), (-0.25, -0.5), "length"),)


def test_a_failed_records_choices_are_dropped_and_a_bad_one_is_refused() -> None:
    choice = ChoiceRecord(index=1, response_token_ids=[7, 8], response_logprobs=[-0.25])
    assert to_recorded_call(record_with(status=CallStatus.ERROR, extra_choices=[choice]), "g").extra_choices == ()
    with pytest.raises(ValueError, match="choice 1"):
        to_recorded_call(record_with(extra_choices=[choice]), "g")


def test_samples_metrics_report_the_new_counts() -> None:
    metrics = build_samples([make_call(0, (1,), (2,))]).stats.as_metrics()
    for name in ("calls_side_skipped", "extra_choices_included", "extra_choices_skipped"):
        assert metrics[f"samples/{name}"] == 0.0
    assert np.isfinite(list(metrics.values())).all()
