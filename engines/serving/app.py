"""The engine's FastAPI application: wiring of state, routes and error rendering only."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response

from engines.serving import openai_api, tokenize_api, weights_api
from engines.serving.bridge import GenerationFailed
from engines.serving.openai_api import POLICY_VERSION_HEADER, json_response
from engines.serving.protocol import RequestError
from engines.serving.state import EngineState


def _validation_error(exc: RequestValidationError) -> RequestError:
    """The first pydantic complaint as an OpenAI-style 400, naming the field."""
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": str(exc)}
    location = [str(part) for part in first.get("loc", ()) if part != "body"]
    param = ".".join(location) or None
    return RequestError(f"{param or 'request body'}: {first.get('msg')}", param=param)


def create_app(state: EngineState) -> FastAPI:
    """The ASGI app over a started or startable engine state; the scheduler runs for the app's lifetime."""

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        state.scheduler.start()
        try:
            yield
        finally:
            state.scheduler.stop()

    app = FastAPI(title="harnessrl embedded engine", lifespan=lifespan)
    app.state.engine = state
    app.include_router(openai_api.router)
    app.include_router(tokenize_api.router)
    app.include_router(weights_api.router)

    @app.exception_handler(RequestError)
    async def _request_error(_: Request, exc: RequestError) -> Response:
        return json_response(exc.body(), state.holder.policy_version, exc.status_code)

    @app.exception_handler(GenerationFailed)
    async def _failed(_: Request, exc: GenerationFailed) -> Response:
        error = RequestError(str(exc), status_code=500, error_type="internal_server_error")
        return json_response(error.body(), state.holder.policy_version, error.status_code)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> Response:
        error = _validation_error(exc)
        return json_response(error.body(), state.holder.policy_version, error.status_code)

    @app.middleware("http")
    async def _policy_version_header(request: Request, call_next):
        response = await call_next(request)
        response.headers.setdefault(POLICY_VERSION_HEADER, str(state.holder.policy_version))
        return response

    return app
