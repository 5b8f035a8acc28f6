"""Admin API for collocated training: pause (drain), resume, state."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from gateway.context import GatewayContext
from gateway.records import GatewayState, PauseResult
from gateway.routes.deps import admin, context

router = APIRouter(prefix="/v1/admin", tags=["control"], dependencies=[Depends(admin)])


@router.post("/pause")
async def pause(timeout_s: float | None = Query(None, gt=0, description="Drain timeout; default from config."),
                svc: GatewayContext = Depends(context)) -> PauseResult:
    """Hold new calls and return once no call is in flight (drained=false if the timeout passed first)."""
    return await svc.gate.pause(timeout_s or svc.config.pause_drain_timeout_s)


@router.post("/resume")
async def resume(svc: GatewayContext = Depends(context)) -> PauseResult:
    """Release the held calls to the (possibly updated) engine."""
    return svc.gate.resume()


@router.get("/state")
async def state(svc: GatewayContext = Depends(context)) -> GatewayState:
    """Pause state, in-flight and held calls, registered endpoints."""
    return GatewayState(paused=svc.gate.paused, in_flight=svc.gate.in_flight, held=svc.gate.held,
                        models=await svc.store.list_models(), paused_s=svc.gate.paused_s)
