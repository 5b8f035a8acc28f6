"""Wiring only: the admin API (FastAPI) behind a raw-ASGI front that sends /r/... straight to the lean proxy."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from gateway.asgi import header, send_error
from gateway.config import GatewayConfig
from gateway.errors import BadRequest, GatewayError, PayloadTooLarge, error_body
from gateway.openapi import harness_paths
from gateway.routes import calls, control, models, rollouts
from gateway.routes.harness import handle_harness
from gateway.services import Services, open_services


def build_admin_app(config: GatewayConfig) -> FastAPI:
    """The FastAPI app of the admin API; its lifespan opens and closes the services."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.services = await open_services(config)
        try:
            yield
        finally:
            await app.state.services.close()

    app = FastAPI(title="harnessrl gateway", version="0.1.0", lifespan=lifespan)
    for module in (rollouts, calls, models, control):
        app.include_router(module.router)

    @app.get("/health", tags=["control"])
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    _install_error_handlers(app)
    _extend_openapi(app)
    return app


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(GatewayError)
    async def gateway_error(_: Request, exc: GatewayError) -> Response:
        return Response(exc.body(), status_code=exc.status, media_type="application/json")

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> Response:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        err = BadRequest(f"invalid request: {problems}")
        return Response(err.body(), status_code=400, media_type="application/json")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> Response:
        body = error_body(str(exc.detail), "invalid_request_error", code=str(exc.status_code))
        return Response(body, status_code=exc.status_code, media_type="application/json")


def _extend_openapi(app: FastAPI) -> None:
    base = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = base()
            schema["paths"].update(harness_paths())
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi


class GatewayApp:
    """The ASGI application of one gateway."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.admin = build_admin_app(config)

    @property
    def services(self) -> Services:
        return self.admin.state.services

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/r/"):
            await handle_harness(self.services, scope, receive, send)
            return
        if scope["type"] == "http" and _too_large(scope, self.config.max_body_bytes):
            await send_error(send, PayloadTooLarge(
                f"request body exceeds the limit of {self.config.max_body_bytes} bytes (max_body_bytes)"))
            return
        await self.admin(scope, receive, send)


def _too_large(scope: dict, limit_bytes: int) -> bool:
    declared = header(scope, b"content-length")
    return declared is not None and declared.isdigit() and int(declared) > limit_bytes


def create_app(config: GatewayConfig) -> GatewayApp:
    """The gateway's ASGI app for `config`."""
    return GatewayApp(config)
