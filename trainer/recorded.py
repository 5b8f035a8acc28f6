"""Gateway call records of a rollout → `trainer.samples.RecordedCall`s.

The gateway stores only the first choice of each call. Only the rollout's final attempt is kept (earlier attempts
were retried after infra failures). Calls with status `error` become `ok=False` with an empty response, so sample
building skips and counts them.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.records import CallRecord, CallStatus, Rollout
from trainer.samples import RecordedCall


def recorded_calls(rollout: Rollout, calls: Iterable[CallRecord]) -> list[RecordedCall]:
    """The final attempt's calls of `rollout`, in `seq` order, as the trainer sees them."""
    converted = []
    for call in calls:
        if call.rollout_id != rollout.id:
            raise ValueError(
                f"call {call.id} belongs to rollout {call.rollout_id!r}, not {rollout.id!r}; "
                "pass only the calls of this rollout"
            )
        if call.attempt == rollout.attempt:
            converted.append(to_recorded_call(call, rollout.group_id))
    return sorted(converted, key=lambda recorded: recorded.seq)


def to_recorded_call(call: CallRecord, group_id: str) -> RecordedCall:
    """One call record as a RecordedCall of group `group_id`."""
    ok = call.status == CallStatus.OK
    if ok and call.policy_version is None:
        raise ValueError(
            f"call {call.id} (rollout {call.rollout_id!r}, seq {call.seq}) succeeded without a policy_version; "
            "register the model with its version so the gateway can record it"
        )
    if ok and len(call.response_logprobs) != len(call.response_token_ids):
        raise ValueError(
            f"call {call.id} (rollout {call.rollout_id!r}, seq {call.seq}) has {len(call.response_logprobs)} "
            f"logprobs for {len(call.response_token_ids)} response tokens; train only on rollouts in train "
            "mode, where the gateway forces logprobs"
        )
    return RecordedCall(
        rollout_id=call.rollout_id,
        group_id=group_id,
        seq=call.seq,
        prompt_token_ids=tuple(call.prompt_token_ids),
        response_token_ids=tuple(call.response_token_ids) if ok else (),
        response_logprobs=tuple(call.response_logprobs) if ok else (),
        policy_version=call.policy_version if call.policy_version is not None else -1,
        ok=ok,
        finish_reason=call.finish_reason,
    )
