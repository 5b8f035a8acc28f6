"""The conversation a translated call continues (`previous_id`, Responses' `previous_response_id`), in constant time.

Every ok answer of a protocol with continuations is recorded with its continuation (`calls.continuation`): the turns
of its conversation as a later call needs them, as JSON, oldest first: the continuation of the answer it continued,
then its own turn (the adapter's `continued`: for Responses its input items and its output items). A call that
continues an answer reads that one stored value by an indexed lookup (`Store.continuation`), whatever the chain's
length, and never the chain's requests and answers: its instructions, tools and the other fields of every earlier
request stay unread. Each continuation holds its conversation once more, as a request sending that conversation whole
would (its `request`).

An id with no stored continuation (unknown, another rollout's or attempt's, a failed call's, another protocol's, or
an answer a gateway older than the column recorded) is a 400 naming it, after one indexed lookup. An older gateway's
chain was followed back through every call of the attempt: an attack review made a 66-byte call load and parse a
whole attempt's calls (9 MB stored, +207 MB held) that way for an unknown id, so that path is gone; a harness whose
chain an older gateway recorded sends the whole conversation once, and chains from then on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from gateway import strict_json
from gateway.context import GatewayContext
from gateway.errors import BadRequest
from gateway.protocols.base import ProtocolAdapter
from gateway.request_bytes import Held

NONE_STORED = b"[]"
"""The stored JSON of an empty conversation (a call that continues nothing)."""


@dataclass(frozen=True)
class Earlier:
    """The conversation a call continues: its turns, oldest first (what the adapter's `to_chat` takes), and their
    JSON as stored (what the call's own continuation extends)."""

    turns: list[Any]
    stored: bytes


NOTHING = Earlier([], NONE_STORED)
"""A call that continues no answer."""


async def earlier_conversation(svc: GatewayContext, adapter: ProtocolAdapter, body: dict[str, Any], rollout_id: str,
                               attempt: int, held: Held) -> Earlier:
    """The conversation `body` continues (`NOTHING` when it names no earlier answer): the stored continuation of
    that answer of this rollout attempt, charged to the request `held` before it is read and before it is parsed
    (`Held.add`: 413 `request_too_costly`, 429, 503: a small call does not make the gateway hold a long
    conversation it is not charged for). BadRequest naming an id that is no ok answer of the adapter's kind in this
    attempt with a stored continuation."""
    previous = adapter.previous_id(body)
    if previous is None:
        return NOTHING
    stored = await _continuation(svc, adapter, previous, rollout_id, attempt, held)
    if stored is None:
        raise BadRequest(f"previous response {previous!r} is not an answer of attempt {attempt} of rollout "
                         f"{rollout_id!r} that a call can continue (none recorded with that id, or one recorded "
                         "by a gateway older than stored continuations); send the whole conversation instead, or an "
                         "id this rollout's gateway returned", param="previous_response_id")
    held.add(strict_json.parse_bytes(stored), f"parsing the conversation of {previous!r}")
    return Earlier(orjson.loads(stored), stored)


async def _continuation(svc: GatewayContext, adapter: ProtocolAdapter, previous: str, rollout_id: str, attempt: int,
                        held: Held) -> bytes | None:
    """The stored continuation of `previous`, read only once `held` is charged its size (None: none stored)."""
    found = await svc.history_store.continuation(rollout_id, attempt, previous, adapter.kind, max_bytes=held.room())
    if found is None:
        return None
    held.add(found.size_bytes, f"loading the conversation of {previous!r} ({found.size_bytes} bytes stored)")
    if found.data is not None:
        return found.data
    found = await svc.history_store.continuation(rollout_id, attempt, previous, adapter.kind)  # room was made since
    return found.data if found is not None else None


def continuation(adapter: ProtocolAdapter, body: dict[str, Any], earlier: bytes, response_raw: bytes) -> bytes | None:
    """The stored continuation of the ok answer `response_raw` to `body`: `earlier` (the stored turns it continued)
    with its own turn appended, as JSON; None when the protocol has no continuations."""
    turn = adapter.continued(body, response_raw)
    if turn is None:
        return None
    return append_json(earlier, turn)


def append_json(stored: bytes, item: Any) -> bytes:
    """The JSON list `stored` (compact, as orjson writes it) with `item` appended, without decoding `stored`."""
    encoded = orjson.dumps(item)
    if stored == NONE_STORED:
        return b"[" + encoded + b"]"
    return stored[:-1] + b"," + encoded + b"]"
