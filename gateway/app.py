"""Wiring only: the admin API (FastAPI) behind a raw-ASGI front that sends /r/... straight to the lean proxy."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from gateway import strict_json
from gateway.asgi import as_json_request, declares_json, header, read_body, send_error
from gateway.auth import Role
from gateway.config import GatewayConfig
from gateway.context import GatewayContext, open_context
from gateway.errors import BadRequest, Forbidden, GatewayError, InternalError, error_body
from gateway.openapi import harness_paths
from gateway.openapi_schemas import harness_schemas
from gateway.routes import artifacts, calls, control, models, rollouts
from gateway.routes.harness import handle_harness

log = logging.getLogger("harnessrl.gateway")


def build_admin_app(config: GatewayConfig) -> FastAPI:
    """The FastAPI app of the admin API; its lifespan opens and closes the gateway context."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.context = await open_context(config)
        try:
            yield
        finally:
            await app.state.context.close()

    app = FastAPI(title="harnessrl gateway", version="0.1.0", lifespan=lifespan)
    for module in (rollouts, artifacts, calls, models, control):
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
        return Response(exc.body(), status_code=exc.status, media_type="application/json", headers=exc.headers())

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> Response:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        err = BadRequest(f"invalid request: {problems}", param=_field(exc.errors()))
        return Response(err.body(), status_code=400, media_type="application/json")

    @app.exception_handler(Exception)
    async def unexpected_error(request: Request, exc: Exception) -> Response:
        log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
        err = InternalError(f"the gateway failed on this request ({type(exc).__name__}); this is a bug of the "
                            "gateway, reported in its log")
        return Response(err.body(), status_code=err.status, media_type="application/json")

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
            schema.setdefault("components", {}).setdefault("schemas", {}).update(harness_schemas())
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi


PUBLIC_PATHS = frozenset({"/health", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})


class GatewayApp:
    """The ASGI application of one gateway."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.admin = build_admin_app(config)

    @property
    def context(self) -> GatewayContext:
        return self.admin.state.context

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/r/"):
            await handle_harness(self.context, scope, receive, send)
            return
        if scope["type"] == "http":
            try:
                self._admit(scope)  # the credential first: nothing of the body is read for a stranger
                body = await read_body(scope, receive, self.config.max_body_bytes)  # chunked bodies are bounded too
                scope = as_json_request(scope, body)
                if declares_json(scope):
                    strict_json.check(body)  # every stored value kept exactly, or a 400 naming the field
            except GatewayError as error:
                await send_error(send, error)
                return
            receive = _replay(body, receive)
        await _answered(self.admin, scope, receive, send)

    def stop_waiting(self) -> None:
        """Answer the long-polls in flight now, and later ones at once: the server is stopping (`gateway.server`)."""
        context = getattr(self.admin.state, "context", None)
        if context is not None:
            context.feed_store.stop_waiting()

    def _admit(self, scope: dict) -> None:
        """Unauthorized or Forbidden unless the caller of a non-public admin path holds an admin or grader token (the
        routes then check which of the two they need)."""
        if scope["path"] in PUBLIC_PATHS:
            return
        principal = self.context.auth.identify(header(scope, b"authorization"))
        if principal.role == Role.ROLLOUT:
            raise Forbidden("a rollout key may not use the admin API; it is valid only under /r/{rollout_id}/")


async def _answered(app, scope: dict, receive, send) -> None:
    """Run `app`; an exception it raises after its answer is complete is dropped. Starlette re-raises an unexpected
    error once its handler (`unexpected_error`: a logged 500) has answered, and the server would then close the
    connection: a client's keep-alive connection outlives a bug of one request."""
    complete = False

    async def tracked(message: dict) -> None:
        nonlocal complete
        await send(message)
        complete = complete or (message["type"] == "http.response.body" and not message.get("more_body", False))

    try:
        await app(scope, receive, tracked)
    except Exception:
        if not complete:
            raise


def _replay(body: bytes, receive):
    """An ASGI `receive` that yields the already-read body once, then defers to the real one (disconnects)."""
    delivered = False

    async def replay() -> dict:
        nonlocal delivered
        if delivered:
            return await receive()
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def _field(errors: Sequence[Any]) -> str | None:
    """The dotted name of the first invalid field, without its location ('body', 'query', 'path')."""
    if not errors:
        return None
    loc = [str(part) for part in errors[0].get("loc", ())]
    if loc and loc[0] in ("body", "query", "path", "header"):
        loc = loc[1:]
    return ".".join(loc) or None


def create_app(config: GatewayConfig) -> GatewayApp:
    """The gateway's ASGI app for `config`."""
    return GatewayApp(config)
