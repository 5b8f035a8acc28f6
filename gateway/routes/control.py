"""Admin API for collocated training: pause (drain), resume, state; on a PostgreSQL store they act on every gateway
of the store (gateway.fleet)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from gateway.context import GatewayContext
from gateway.records import GatewayState, PauseResult
from gateway.routes.deps import admin, context

router = APIRouter(prefix="/v1/admin", tags=["control"], dependencies=[Depends(admin)])


@router.post("/pause")
async def pause(timeout_s: float | None = Query(None, gt=0, description="Drain timeout; default from config."),
                svc: GatewayContext = Depends(context)) -> PauseResult:
    """Hold new calls on every gateway of the store and return once none has a call in flight (drained=false if the
    timeout passed first). The pause is kept in the store: a gateway started meanwhile holds too."""
    return await svc.fleet.pause(timeout_s or svc.config.pause_drain_timeout_s)


@router.post("/resume")
async def resume(svc: GatewayContext = Depends(context)) -> PauseResult:
    """Release the held calls to the (possibly updated) engine: here at once, on the store's other gateways within
    `fleet_poll_s`."""
    return await svc.fleet.resume()


@router.get("/state")
async def state(svc: GatewayContext = Depends(context)) -> GatewayState:
    """The store's pause, calls in flight and held on every live gateway, registered endpoints, the gateways."""
    control, gateways = await svc.fleet.state()
    live = [g for g in gateways if g.live]
    return GatewayState(paused=control.paused, in_flight=sum(g.in_flight for g in live),
                        held=sum(g.held for g in live), models=await svc.admin_store.list_models(),
                        paused_s=control.paused_s, gateways=gateways)
