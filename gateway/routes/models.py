"""Admin API for the upstream endpoints the gateway forwards to."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request

from gateway.context import GatewayContext
from gateway.errors import NotFound, Unprocessable
from gateway.records import ModelIn, ModelRecord, ModelVersionPatch
from gateway.routes.deps import admin, context
from gateway.upstream_url import gateway_address, own_addresses

router = APIRouter(prefix="/v1/admin/models", tags=["models"], dependencies=[Depends(admin)])


@router.post("", responses={422: {"description": "base_url points at this gateway itself (code "
                                                 "base_url_is_gateway)"}})
async def register_model(body: ModelIn, request: Request, svc: GatewayContext = Depends(context)) -> ModelRecord:
    """Register (or update) one endpoint serving a model; several endpoints of one name share the load."""
    addresses = own_addresses(svc.config.host, svc.config.port, svc.config.public_url, request.scope)
    own = gateway_address(body.base_url, addresses)
    if own is not None:
        raise Unprocessable(f"base_url {body.base_url!r} points at this gateway itself ({own.source}: "
                            f"{own.host}:{own.port}): its calls would come back to the gateway; register the "
                            "engine's OpenAI base URL, e.g. http://engine-host:8000/v1", param="base_url",
                            code="base_url_is_gateway")
    record = await svc.admin_store.register_model(body)
    await svc.reload_models()
    return record


@router.get("")
async def list_models(svc: GatewayContext = Depends(context)) -> list[ModelRecord]:
    """Every registered endpoint."""
    return await svc.admin_store.list_models()


@router.patch("/{name:path}")
async def set_version(name: str, body: ModelVersionPatch, svc: GatewayContext = Depends(context)) -> list[ModelRecord]:
    """Set the policy version of a model (after a weight update)."""
    records = await svc.admin_store.set_model_version(name, body.version)
    await svc.reload_models()
    return records


@router.delete("/{name:path}")
async def delete_model(name: str, base_url: str | None = Query(None, description="Only this endpoint."),
                       svc: GatewayContext = Depends(context)) -> dict[str, int]:
    """Unregister a model's endpoints."""
    removed = await svc.admin_store.delete_model(name, base_url)
    if not removed:
        raise NotFound(f"no endpoint of model {name!r}" + (f" at {base_url}" if base_url else ""), param="name")
    await svc.reload_models()
    return {"removed": removed}
