"""Gateway call records of a rollout → `trainer.samples.RecordedCall`s.

Every choice of a call comes along (the first in the call's own fields, the others as `RecordedChoice`s), and the
call's `side` mark. Only the rollout's final attempt is kept (earlier attempts were retried after infra failures).
Calls with status `error` become `ok=False` with an empty response and no extra choices, so sample building skips and
counts them.

A call's `sampling` (the parameters the engine applied, recorded by the gateway) becomes its
`trainer.sampling.SamplingParams`; records without it (written before the gateway recorded sampling) are read as
temperature 1, no filtering.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.records import CallRecord, CallStatus, Rollout
from trainer.samples import RecordedCall, RecordedChoice
from trainer.sampling import SamplingParams, sampling_params


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
    for choice in (call, *call.extra_choices) if ok else ():
        if len(choice.response_logprobs) != len(choice.response_token_ids):
            raise ValueError(
                f"call {call.id} (rollout {call.rollout_id!r}, seq {call.seq}, choice {getattr(choice, 'index', 0)}) "
                f"has {len(choice.response_logprobs)} logprobs for {len(choice.response_token_ids)} response tokens; "
                "train only on rollouts in train mode, where the gateway forces logprobs"
            )
    sampling = _call_sampling(call)
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
        extra_choices=tuple(
            RecordedChoice(
                index=choice.index,
                prompt_token_ids=tuple(choice.prompt_token_ids),
                response_token_ids=tuple(choice.response_token_ids),
                response_logprobs=tuple(choice.response_logprobs),
                finish_reason=choice.finish_reason,
            )
            for choice in call.extra_choices
        )
        if ok
        else (),
        side=call.side,
        sampling=sampling,
        recorded_prefix=call.recorded_prefix,
    )


def _call_sampling(call: CallRecord) -> SamplingParams:
    """The applied sampling parameters of `call` (temperature 1, no filtering when the record has none)."""
    try:
        return sampling_params(getattr(call, "sampling", None))
    except ValueError as error:
        raise ValueError(
            f"call {call.id} (rollout {call.rollout_id!r}, seq {call.seq}) has an unreadable sampling record: "
            f"{error}"
        ) from error
