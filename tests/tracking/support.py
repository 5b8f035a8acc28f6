"""Hand-built gateway records for the tracking tests."""

from __future__ import annotations

from typing import Any

from gateway.records import CallRecord, CallStatus, Rollout, RolloutMode, RolloutState


def make_rollout(rollout_id: str = "r1", reward: float | None = 1.0, attempt: int = 1, **fields: Any) -> Rollout:
    values: dict[str, Any] = dict(id=rollout_id, group_id="g1", input={}, mode=RolloutMode.TRAIN,
                                  state=RolloutState.SUCCEEDED, attempt=attempt, max_attempts=3, reward=reward,
                                  created_at=0.0)
    return Rollout(**{**values, **fields})


def make_call(seq: int, messages: list[dict[str, Any]], answer: str | None, *, rollout_id: str = "r1",
              attempt: int = 1, **fields: Any) -> CallRecord:
    values: dict[str, Any] = dict(
        id=seq, rollout_id=rollout_id, attempt=attempt, seq=seq, kind="chat", stream=False, model="tiny",
        upstream="http://engine/v1", status=CallStatus.OK, http_status=200, error=None,
        request={"model": "tiny", "messages": messages}, response_raw=None, response_id=None, prompt_token_ids=[1],
        response_token_ids=[2], response_logprobs=[-0.1], response_text=answer, finish_reason="stop", n_choices=1,
        policy_version=0, latency_ms=1.0, created_at=0.0)
    return CallRecord(**{**values, **fields})


SYSTEM = {"role": "system", "content": "You solve tasks."}
USER = {"role": "user", "content": "Fix the bug."}
