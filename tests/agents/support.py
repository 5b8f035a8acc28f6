"""Helpers for recipe tests: call records as the gateway stores them."""

from __future__ import annotations

from gateway.records import CallRecord


def call_record(seq: int, text: str | None, status: str = "ok") -> CallRecord:
    """A chat call of rollout "r" whose first choice's text is `text`."""
    return CallRecord(id=seq, rollout_id="r", attempt=0, seq=seq, kind="chat", stream=False, model="policy",
                      upstream=None, status=status, http_status=200, error=None, request={}, response_raw=None,
                      response_id=None, prompt_token_ids=[], response_token_ids=[], response_logprobs=[],
                      response_text=text, finish_reason="stop", n_choices=1, policy_version=0, latency_ms=1.0,
                      created_at=0.0)
