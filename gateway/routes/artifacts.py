"""Admin API for a rollout's artifacts: opaque blobs per attempt (the controller's packed working directories)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from gateway.artifacts import ArtifactInfo, check_name
from gateway.context import GatewayContext
from gateway.records import MAX_ATTEMPT
from gateway.routes.deps import admin, context, grader

router = APIRouter(prefix="/v1/admin/rollouts", tags=["artifacts"])
_OCTETS = {"content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}


@router.put("/{rollout_id}/artifacts/{name}", dependencies=[Depends(admin)],
            openapi_extra={"requestBody": {"required": True, **_OCTETS}})
async def put_artifact(rollout_id: str, name: str, request: Request,
                       svc: GatewayContext = Depends(context)) -> ArtifactInfo:
    """Store (or replace) an artifact of the rollout's current attempt; the body is opaque bytes."""
    data = await request.body()
    return await svc.artifact_store.put_artifact(rollout_id, check_name(name), data, refuse_finished=False)


@router.get("/{rollout_id}/artifacts/{name}", dependencies=[Depends(grader)], response_class=Response,
            responses={200: {"description": "The artifact's bytes.", **_OCTETS}})
async def get_artifact(rollout_id: str, name: str,
                       attempt: int | None = Query(None, ge=0, le=MAX_ATTEMPT,
                                                    description="Attempt (default: the current one)."),
                       svc: GatewayContext = Depends(context)) -> Response:
    """An artifact's bytes (404 when absent)."""
    data = await svc.artifact_store.get_artifact(rollout_id, check_name(name), attempt)
    return Response(data, media_type="application/octet-stream")
