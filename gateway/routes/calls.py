"""Admin API for recorded calls."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Response

from gateway.context import GatewayContext
from gateway.records import MAX_ATTEMPT, MORE_CALLS_HEADER, CallRecord
from gateway.routes.deps import admin, context

router = APIRouter(prefix="/v1/admin/rollouts", tags=["calls"])


@router.get("/{rollout_id}/calls", dependencies=[Depends(admin)])
async def list_calls(rollout_id: str, response: Response,
                     attempt: int | None = Query(None, ge=0, le=MAX_ATTEMPT, description="Only this attempt."),
                     after_seq: int | None = Query(None, ge=-1, le=2**31 - 1, description="A page: only the calls "
                                                   "numbered above this one (needs `attempt`)."),
                     limit: int | None = Query(None, ge=1, le=10_000, description="A page: at most this many "
                                               "calls (needs `attempt`)."),
                     max_bytes: int | None = Query(None, ge=1, le=2**40, description="A page: no more calls than "
                                                   "fit in this many stored bytes, but at least one (needs "
                                                   "`attempt`); a page it cut short says so in the "
                                                   f"`{MORE_CALLS_HEADER}` header."),
                     svc: GatewayContext = Depends(context)) -> list[CallRecord]:
    """A rollout's recorded calls ordered by attempt and arrival, with their token IDs and logprobs; one attempt's
    calls can be read in pages (`after_seq`, `limit`, `max_bytes`), as `GatewayClient.calls` does."""
    store = svc.feed_store
    calls = await store.list_calls(rollout_id, attempt, after_seq=after_seq, limit=limit, max_bytes=max_bytes)
    if max_bytes is not None and calls and (limit is None or len(calls) < limit):
        follows = await store.call_follows(rollout_id, calls[-1].attempt, calls[-1].seq)
        response.headers[MORE_CALLS_HEADER] = "true" if follows else "false"
    return calls
