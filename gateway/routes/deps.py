"""FastAPI dependencies shared by the admin routes: the services and the caller's role."""

from __future__ import annotations

from fastapi import Header, Request

from gateway.auth import Principal, Role
from gateway.services import Services


def services(request: Request) -> Services:
    """The process's services."""
    return request.app.state.services


def admin(request: Request, authorization: str | None = Header(default=None)) -> Principal:
    """Only the admin token."""
    return services(request).auth.require(authorization)


def grader(request: Request, authorization: str | None = Header(default=None)) -> Principal:
    """The admin or the grader token."""
    return services(request).auth.require(authorization, Role.GRADER)
