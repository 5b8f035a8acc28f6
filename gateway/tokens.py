"""Compact storage of token IDs, logprobs and extra choices, and conversion of stored call rows to wire records."""

from __future__ import annotations

import math
import struct
from array import array
from collections.abc import Sequence
from typing import Any

import orjson

from gateway import strict_json
from gateway.capture import Captured
from gateway.nul_text import from_column
from gateway.records import CallRecord, CallStatus, ChoiceRecord, SamplingRecord


def pack_ids(ids: Sequence[int]) -> bytes:
    """Token IDs as int32 bytes in this machine's order (little-endian on the platforms served)."""
    return struct.pack(f"{len(ids)}i", *ids)


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


def pack_extra_choices(cap: Captured) -> bytes | None:
    """The choices with index >= 1 as JSON (a list of `ChoiceRecord` fields; a NaN logprob as null, floats exact), or
    None when the answer had only one. A choice's prompt IDs are kept only when they differ from the call's."""
    choices = cap.other_choices()
    if not choices:
        return None
    return orjson.dumps([{
        "index": c.index,
        "prompt_token_ids": c.prompt_token_ids if c.prompt_token_ids != cap.prompt_token_ids else [],
        "response_token_ids": c.response_token_ids, "response_logprobs": c.response_logprobs,
        "response_text": c.response_text or None, "finish_reason": c.finish_reason,
    } for c in choices])


def unpack_extra_choices(blob: bytes | None) -> list[ChoiceRecord]:
    """Inverse of `pack_extra_choices` (NULL: no extra choices)."""
    if blob is None:
        return []
    choices = []
    for item in orjson.loads(blob):
        item["response_logprobs"] = [math.nan if v is None else v for v in item["response_logprobs"]]
        choices.append(ChoiceRecord(**item))
    return choices


def pack_sampling(sampling: SamplingRecord | None) -> bytes | None:
    """A call's sampling record as JSON (None: the call sampled nothing)."""
    return None if sampling is None else sampling.model_dump_json().encode()


def unpack_sampling(blob: bytes | None) -> SamplingRecord | None:
    """Inverse of `pack_sampling` (NULL: nothing sampled, or a call recorded before the column existed)."""
    return None if blob is None else SamplingRecord.model_validate_json(blob)


ID_BYTES, FLOAT_BYTES = 36, 32
"""What one unpacked token id (a list slot and an int object; 4 bytes stored) and one logprob (a slot and a float; 8
stored) take in memory."""


def record_memory_bytes(row: Any) -> int:
    """An upper bound on the memory `call_row_to_record(row)` builds beyond the row: its request parsed
    (`strict_json.parse_bytes`), its answer as text, its token ids and logprobs as Python lists."""
    def stored(name: str) -> int:
        value = getattr(row, name, None)
        return len(value) if value is not None else 0
    return (stored("request") + strict_json.parse_bytes(row.request) + 4 * stored("response_raw")
            + (stored("prompt_token_ids") + stored("response_token_ids")) // 4 * ID_BYTES
            + stored("response_logprobs") // 8 * FLOAT_BYTES + 4 * (stored("response_text") + stored("extra_choices")))


def call_row_to_record(row: Any) -> CallRecord:
    """A stored call row as a `CallRecord`."""
    return CallRecord(
        id=row.id, rollout_id=row.rollout_id, attempt=row.attempt, seq=row.seq, kind=row.kind, stream=row.stream,
        model=from_column(row.model), upstream=row.upstream, status=CallStatus(row.status),
        http_status=row.http_status,
        error=from_column(row.error), error_code=row.error_code, request=orjson.loads(row.request),
        response_raw=row.response_raw.decode("utf-8", "replace") if row.response_raw is not None else None,
        response_id=from_column(row.response_id), prompt_token_ids=unpack_ids(row.prompt_token_ids),
        response_token_ids=unpack_ids(row.response_token_ids),
        response_logprobs=unpack_floats(row.response_logprobs), response_text=from_column(row.response_text),
        finish_reason=from_column(row.finish_reason), n_choices=row.n_choices,
        extra_choices=unpack_extra_choices(row.extra_choices), side=bool(row.side),
        sampling=unpack_sampling(row.sampling), policy_version=row.policy_version,
        recorded_prefix=row.recorded_prefix,
        latency_ms=row.latency_ms, created_at=row.created_at,
    )
