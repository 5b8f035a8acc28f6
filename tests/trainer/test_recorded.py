"""Gateway call records → trainer RecordedCalls: first choice, failed calls, attempts, refused records."""

from __future__ import annotations

import pytest

from gateway.records import CallRecord, CallStatus, Rollout, RolloutMode, RolloutState
from trainer.recorded import recorded_calls, to_recorded_call
from trainer.samples import build_samples


def make_record(
    seq: int,
    prompt: list[int],
    response: list[int],
    *,
    attempt: int = 1,
    status: str = "ok",
    version: int | None = 3,
    logprobs: list[float] | None = None,
) -> CallRecord:
    return CallRecord(
        id=100 + seq,
        rollout_id="r1",
        attempt=attempt,
        seq=seq,
        kind="chat",
        stream=False,
        model="tiny",
        upstream="http://engine/v1",
        status=CallStatus(status),
        http_status=200 if status == "ok" else 502,
        error=None if status == "ok" else "upstream closed",
        request={},
        response_raw=None,
        response_id=None,
        prompt_token_ids=prompt,
        response_token_ids=response,
        response_logprobs=[-0.5] * len(response) if logprobs is None else logprobs,
        response_text=None,
        finish_reason="stop" if status == "ok" else None,
        n_choices=1,
        policy_version=version,
        latency_ms=1.0,
        created_at=0.0,
    )


def make_rollout(attempt: int = 1) -> Rollout:
    return Rollout(
        id="r1",
        group_id="g7",
        input={},
        mode=RolloutMode.TRAIN,
        state=RolloutState.SUCCEEDED,
        attempt=attempt,
        max_attempts=3,
        reward=1.0,
        created_at=0.0,
    )


def test_ok_call_keeps_tokens_logprobs_version_and_group():
    call = to_recorded_call(make_record(2, [1, 2], [3, 4], logprobs=[-0.1, -0.2]), "g7")
    assert (call.rollout_id, call.group_id, call.seq, call.ok) == ("r1", "g7", 2, True)
    assert call.prompt_token_ids == (1, 2) and call.response_token_ids == (3, 4)
    assert call.response_logprobs == (-0.1, -0.2) and call.policy_version == 3
    assert call.finish_reason == "stop"


@pytest.mark.parametrize(("response", "logprobs", "version"), [([9, 9], [], None), ([], [], 4), ([5], [-1.0], 2)])
def test_error_call_is_not_ok_and_has_no_response(response, logprobs, version):
    call = to_recorded_call(make_record(0, [1], response, status="error", version=version, logprobs=logprobs), "g")
    assert call.ok is False and call.response_token_ids == () and call.response_logprobs == ()
    assert call.policy_version == (version if version is not None else -1)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (make_record(0, [1], [2], version=None), "without a policy_version"),
        (make_record(0, [1], [2, 3], logprobs=[]), "0 logprobs for 2 response tokens"),
    ],
)
def test_unusable_ok_calls_are_refused(record, message):
    with pytest.raises(ValueError, match=message):
        to_recorded_call(record, "g")


def test_only_the_final_attempt_is_kept_in_seq_order():
    records = [
        make_record(1, [1, 2, 3, 4, 5], [6], attempt=2),
        make_record(0, [7], [8], attempt=1),
        make_record(0, [1, 2], [3, 4], attempt=2),
    ]
    calls = recorded_calls(make_rollout(attempt=2), records)
    assert [(c.seq, c.response_token_ids) for c in calls] == [(0, (3, 4)), (1, (6,))]


def test_calls_of_another_rollout_are_refused():
    other = make_record(0, [1], [2]).model_copy(update={"rollout_id": "r2"})
    with pytest.raises(ValueError, match="belongs to rollout 'r2'"):
        recorded_calls(make_rollout(), [other])


def test_records_merge_into_one_sample_and_failed_calls_are_counted():
    records = [
        make_record(0, [1, 2], [3, 4]),
        make_record(1, [1, 2, 3, 4], [], status="error"),
        make_record(2, [1, 2, 3, 4, 5], [6]),
    ]
    batch = build_samples(recorded_calls(make_rollout(), records))
    (sample,) = batch.samples
    assert sample.token_ids_T.tolist() == [1, 2, 3, 4, 5, 6] and sample.group_id == "g7"
    assert sample.loss_mask_T.astype(int).tolist() == [0, 0, 1, 1, 0, 1]
    assert batch.stats.calls_failed == 1
