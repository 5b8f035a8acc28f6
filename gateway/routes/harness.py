"""The harness-facing API under /r/{rollout_id}/: the OpenAI-compatible proxy and the harness's own events.

Served as raw ASGI (no framework routing or validation on the hot path). Paths:
  POST /r/{id}/v1/chat/completions   POST /r/{id}/v1/completions   GET /r/{id}/v1/models   POST /r/{id}/events
  GET|PUT /r/{id}/artifacts/{name}   (opaque bytes of the rollout's current attempt)
"""

from __future__ import annotations

import logging
import time

import orjson
from pydantic import ValidationError

from gateway.artifacts import check_name
from gateway.asgi import header, read_body, send_bytes, send_error
from gateway.auth import Principal, Role, check_key_attempt
from gateway.context import GatewayContext
from gateway.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    GatewayError,
    InternalError,
    MethodNotAllowed,
    NotFound,
    QuotaExceeded,
)
from gateway.proxy import (
    CHAT,
    COMPLETION,
    CallContext,
    forward_stream,
    forward_unary,
    parse_request,
    upstream_request,
)
from gateway.records import TERMINAL_STATES, EventIn, EventKind
from gateway.routing import is_side_call
from gateway.store import RolloutBrief

log = logging.getLogger("harnessrl.gateway")
PROXY_KINDS = {("v1", "chat", "completions"): CHAT, ("v1", "completions"): COMPLETION}


async def handle_harness(svc: GatewayContext, scope: dict, receive, send) -> None:
    """Entry point for every request whose path starts with /r/: every error is answered OpenAI-shaped (when the
    answer has not begun; a stream under way ends the way the proxy ends it)."""
    started = False

    async def tracked(message: dict) -> None:
        nonlocal started
        started = started or message["type"] == "http.response.start"
        await send(message)

    try:
        await _dispatch(svc, scope, receive, tracked)
    except GatewayError as error:
        if started:
            raise
        await send_error(send, error)
    except Exception as exc:
        log.exception("unexpected error on %s %s", scope["method"], scope["path"])
        if started:
            raise
        await send_error(send, InternalError(f"the gateway failed on this request ({type(exc).__name__}); this is "
                                             "a bug of the gateway, reported in its log"))


async def _dispatch(svc: GatewayContext, scope: dict, receive, send) -> None:
    parts = scope["path"].strip("/").split("/")
    if len(parts) < 3 or not parts[1]:
        raise NotFound(f"no route {scope['path']!r}; harness paths are /r/{{rollout_id}}/v1/...")
    rollout_id, rest, method = parts[1], tuple(parts[2:]), scope["method"]
    kind = PROXY_KINDS.get(rest)
    artifact = len(rest) == 2 and rest[0] == "artifacts"
    if kind is not None and method == "POST":
        await _proxy(svc, scope, receive, send, rollout_id, kind)
    elif rest == ("v1", "models") and method == "GET":
        svc.auth.require_rollout(header(scope, b"authorization"), rollout_id)
        await _models(svc, send)
    elif rest == ("events",) and method == "POST":
        await _post_event(svc, scope, receive, send, rollout_id)
    elif artifact and method in ("GET", "PUT"):
        await _artifact(svc, scope, receive, send, rollout_id, rest[1])
    elif kind is not None or artifact or rest in (("v1", "models"), ("events",)):
        raise MethodNotAllowed(f"method {method} is not allowed on {scope['path']}")
    else:
        raise NotFound(f"no route {scope['path']!r}; harness paths are /r/{{rollout_id}}/v1/chat/completions, "
                       "/v1/completions, /v1/models, /events and /artifacts/{name}")


async def _proxy(svc: GatewayContext, scope: dict, receive, send, rollout_id: str, kind: str) -> None:
    started, created_at = time.perf_counter(), time.time()
    principal = svc.auth.require_rollout(header(scope, b"authorization"), rollout_id)
    raw = await read_body(scope, receive, svc.config.max_body_bytes)
    request = parse_request(raw, kind)
    brief = await _live_brief(svc, principal, rollout_id, "calls are")
    endpoint = svc.router.pick(request.get("model"), rollout_id)
    body = upstream_request(request, kind, brief.mode, endpoint.served_name)
    seq = await svc.store.next_call_seq(rollout_id, brief.attempt)
    if seq >= svc.config.max_calls_per_attempt:
        raise QuotaExceeded(f"attempt {brief.attempt} of rollout {rollout_id!r} has made its "
                            f"{svc.config.max_calls_per_attempt} calls, the limit per attempt "
                            "(max_calls_per_attempt); nothing was forwarded")
    stream = bool(request.get("stream", False))
    ctx = CallContext(rollout_id=rollout_id, attempt=brief.attempt, seq=seq, kind=kind, stream=stream,
                      model=str(request.get("model", "")), endpoint=endpoint, request_raw=raw,
                      created_at=created_at, started=started,
                      side=is_side_call(kind, str(request.get("model", "")), svc.config.side_models))
    await (forward_stream if stream else forward_unary)(svc, ctx, body, send)


async def _live_brief(svc: GatewayContext, principal: Principal, rollout_id: str, what: str) -> RolloutBrief:
    """The rollout's brief once it is known to accept writes from this caller: not finished (409
    `rollout_finished`), and for a rollout key, its own attempt still live (409 `stale_attempt`)."""
    brief = await svc.store.brief(rollout_id)
    if brief.state in TERMINAL_STATES:
        raise Conflict(f"rollout {rollout_id!r} is {brief.state}; {what} accepted only while it is queued or "
                       "running", code="rollout_finished")
    check_key_attempt(principal, rollout_id, brief.state, brief.attempt)
    return brief


async def _models(svc: GatewayContext, send) -> None:
    data = [{"id": name, "object": "model", "created": 0, "owned_by": "harnessrl"} for name in svc.router.names()]
    await send_bytes(send, 200, orjson.dumps({"object": "list", "data": data}))


async def _post_event(svc: GatewayContext, scope: dict, receive, send, rollout_id: str) -> None:
    principal = svc.auth.require_rollout(header(scope, b"authorization"), rollout_id)
    raw = await read_body(scope, receive, svc.config.max_body_bytes)
    try:
        event = EventIn.model_validate_json(raw)
    except ValidationError as exc:
        raise BadRequest(f"invalid event: {exc.errors(include_url=False)}") from None
    if event.kind in (EventKind.REWARD, EventKind.STATE) and principal.role != Role.ADMIN:
        raise Forbidden(f"a harness may not post {event.kind} events; rewards come from the grader")
    brief = await _live_brief(svc, principal, rollout_id, "events are")
    stored = await svc.store.add_event(rollout_id, event.kind, event.payload, attempt=brief.attempt,
                                       quota_bytes=svc.config.max_event_bytes_per_attempt)
    await send_bytes(send, 200, stored.model_dump_json().encode())


async def _artifact(svc: GatewayContext, scope: dict, receive, send, rollout_id: str, name: str) -> None:
    """GET or PUT one artifact of the caller's own rollout; a finished rollout refuses PUTs (409)."""
    principal = svc.auth.require_rollout(header(scope, b"authorization"), rollout_id)
    check_name(name)
    if scope["method"] == "GET":
        brief = await svc.store.brief(rollout_id)
        check_key_attempt(principal, rollout_id, brief.state, brief.attempt, live=False)
        data = await svc.store.get_artifact(rollout_id, name, None)
        await send_bytes(send, 200, data, content_type=b"application/octet-stream")
        return
    brief = await _live_brief(svc, principal, rollout_id, "artifacts are")
    raw = await read_body(scope, receive, svc.config.max_body_bytes)
    stored = await svc.store.put_artifact(rollout_id, name, raw, refuse_finished=True, attempt=brief.attempt,
                                          quota_bytes=svc.config.max_artifact_bytes_per_attempt)
    await send_bytes(send, 200, stored.model_dump_json().encode())
