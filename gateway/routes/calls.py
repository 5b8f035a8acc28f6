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
                     svc: GatewayContext = Depends(context)) -> list[CallRecord]:
    """A rollout's recorded calls ordered by attempt and arrival, with their token IDs and logprobs."""
    return await svc.feed_store.list_calls(rollout_id, attempt)
