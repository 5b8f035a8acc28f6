"""Admin API for recorded calls."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from gateway.context import GatewayContext
from gateway.records import MAX_ATTEMPT, CallRecord
from gateway.routes.deps import admin, context

router = APIRouter(prefix="/v1/admin/rollouts", tags=["calls"])


@router.get("/{rollout_id}/calls", dependencies=[Depends(admin)])
async def list_calls(rollout_id: str,
                     attempt: int | None = Query(None, ge=0, le=MAX_ATTEMPT, description="Only this attempt."),
                     after_seq: int | None = Query(None, ge=-1, le=2**31 - 1, description="A page: only the calls "
                                                   "numbered above this one (needs `attempt`)."),
                     limit: int | None = Query(None, ge=1, le=10_000, description="A page: at most this many "
                                               "calls (needs `attempt`)."),
                     svc: GatewayContext = Depends(context)) -> list[CallRecord]:
    """A rollout's recorded calls ordered by attempt and arrival, with their token IDs and logprobs; one attempt's
    calls can be read in pages (`after_seq`, `limit`), as `GatewayClient.calls` does."""
    return await svc.feed_store.list_calls(rollout_id, attempt, after_seq=after_seq, limit=limit)
