"""FastAPI dependencies shared by the admin routes: the gateway context and the caller's role."""

from __future__ import annotations

from fastapi import Header, Request

from gateway.auth import Principal, Role
from gateway.context import GatewayContext


def context(request: Request) -> GatewayContext:
    """The process's gateway context."""
    return request.app.state.context


def admin(request: Request, authorization: str | None = Header(default=None)) -> Principal:
    """Only the admin token."""
    return context(request).auth.require(authorization)


def grader(request: Request, authorization: str | None = Header(default=None)) -> Principal:
    """The admin or the grader token."""
    return context(request).auth.require(authorization, Role.GRADER)
