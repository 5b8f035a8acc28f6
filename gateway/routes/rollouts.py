"""Admin API for rollouts: create (batch, idempotent), claim, renew leases, change state, rewards, events, finished."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from gateway.auth import mint_rollout_key
from gateway.context import GatewayContext
from gateway.records import (
    MAX_CURSOR,
    ClaimedRollout,
    ClaimRequest,
    CreateRolloutsRequest,
    Event,
    EventIn,
    FinishedPage,
    LeaseRenewal,
    RewardIn,
    Rollout,
    RolloutCreated,
    RolloutPatch,
)
from gateway.routes.deps import admin, context, grader

router = APIRouter(prefix="/v1/admin/rollouts", tags=["rollouts"])


@router.post("", dependencies=[Depends(admin)])
async def create_rollouts(body: CreateRolloutsRequest, svc: GatewayContext = Depends(context)) -> list[RolloutCreated]:
    """Create rollouts all-or-nothing; each gets its base URL and own key. Re-posting an id returns the same."""
    results = await svc.feed_store.create_rollouts(body.rollouts)
    secret = await svc.feed_store.secret()
    base = svc.config.base_url()
    return [RolloutCreated(id=r.id, base_url=f"{base}/r/{r.id}/v1",
                           api_key=mint_rollout_key(secret, r.id, r.attempt), created=created)
            for r, created in results]


@router.post("/claim", dependencies=[Depends(admin)])
async def claim(body: ClaimRequest, svc: GatewayContext = Depends(context)) -> list[ClaimedRollout]:
    """Lease up to `limit` queued rollouts to a controller (expired leases are requeued first), each with its base URL
    and the key of the attempt just claimed."""
    claimed = await svc.lease_store.claim(body.controller_id, body.limit, body.lease_s)
    secret = await svc.lease_store.secret()
    base = svc.config.base_url()
    return [ClaimedRollout(**r.model_dump(), base_url=f"{base}/r/{r.id}/v1",
                           api_key=mint_rollout_key(secret, r.id, r.attempt)) for r in claimed]


@router.get("/finished", dependencies=[Depends(admin)])
async def finished(after: int = Query(0, ge=0, le=MAX_CURSOR, description="Cursor from the previous page."),
                   limit: int = Query(100, ge=1, le=1000), wait_s: float = Query(0.0, ge=0, le=300),
                   svc: GatewayContext = Depends(context)) -> FinishedPage:
    """Rollouts finished after the cursor; long-polls up to `wait_s` when there are none yet."""
    return await svc.feed_store.list_finished(after, limit, wait_s)


@router.get("/{rollout_id}", dependencies=[Depends(grader)])
async def get_rollout(rollout_id: str, svc: GatewayContext = Depends(context)) -> Rollout:
    """One rollout."""
    return await svc.feed_store.get_rollout(rollout_id)


@router.patch("/{rollout_id}", dependencies=[Depends(admin)])
async def patch_rollout(rollout_id: str, body: RolloutPatch, svc: GatewayContext = Depends(context)) -> Rollout:
    """Change state along the state machine (409 when not allowed)."""
    return await svc.lease_store.transition(rollout_id, body)


@router.post("/{rollout_id}/lease", dependencies=[Depends(admin)])
async def renew_lease(rollout_id: str, body: LeaseRenewal, svc: GatewayContext = Depends(context)) -> Rollout:
    """Extend the lease of a running rollout (with `close_calls`: its attempt records no more calls)."""
    return await svc.lease_store.renew_lease(rollout_id, body.controller_id, body.lease_s,
                                             close_calls=body.close_calls)


@router.post("/{rollout_id}/reward", dependencies=[Depends(grader)])
async def post_reward(rollout_id: str, body: RewardIn, svc: GatewayContext = Depends(context)) -> Rollout:
    """The grader's reward, fenced by `attempt` and `controller_id` when given; a finished rollout's reward is final."""
    return await svc.lease_store.set_reward(rollout_id, body)


@router.post("/{rollout_id}/events", dependencies=[Depends(grader)])
async def post_event(rollout_id: str, body: EventIn, svc: GatewayContext = Depends(context)) -> Event:
    """Append an event (logs, agent output) as the admin or the grader."""
    return await svc.lease_store.add_event(rollout_id, body.kind, body.payload)


@router.get("/{rollout_id}/events", dependencies=[Depends(grader)])
async def list_events(rollout_id: str, svc: GatewayContext = Depends(context)) -> list[Event]:
    """A rollout's events in order."""
    return await svc.feed_store.list_events(rollout_id)
