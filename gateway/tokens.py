"""Compact storage of token IDs and logprobs, and conversion of stored call rows to wire records."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import orjson

from gateway.records import CallRecord, CallStatus


def pack_ids(ids: Sequence[int]) -> bytes:
    """Token IDs as little-endian int32 bytes."""
    return array("i", ids).tobytes()


def unpack_ids(blob: bytes) -> list[int]:
    """Inverse of `pack_ids`."""
    values = array("i")
    values.frombytes(blob)
    return values.tolist()


def pack_floats(values: Sequence[float]) -> bytes:
    """Logprobs as float64 bytes (exactly the floats the engine returned)."""
    return array("d", values).tobytes()


def unpack_floats(blob: bytes) -> list[float]:
    """Inverse of `pack_floats`."""
    values = array("d")
    values.frombytes(blob)
    return values.tolist()


def call_row_to_record(row: Any) -> CallRecord:
    """A stored call row as a `CallRecord`."""
    return CallRecord(
        id=row.id, rollout_id=row.rollout_id, attempt=row.attempt, seq=row.seq, kind=row.kind, stream=row.stream,
        model=row.model, upstream=row.upstream, status=CallStatus(row.status), http_status=row.http_status,
        error=row.error, request=orjson.loads(row.request),
        response_raw=row.response_raw.decode("utf-8", "replace") if row.response_raw is not None else None,
        response_id=row.response_id, prompt_token_ids=unpack_ids(row.prompt_token_ids),
        response_token_ids=unpack_ids(row.response_token_ids),
        response_logprobs=unpack_floats(row.response_logprobs), response_text=row.response_text,
        finish_reason=row.finish_reason, n_choices=row.n_choices, policy_version=row.policy_version,
        latency_ms=row.latency_ms, created_at=row.created_at,
    )
