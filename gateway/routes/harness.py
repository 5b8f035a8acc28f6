"""The harness-facing API under /r/{rollout_id}/: the OpenAI-compatible proxy, the protocols translated to chat
completions, and the harness's own events.

Served as raw ASGI (no framework routing or validation on the hot path). Paths:
  POST /r/{id}/v1/chat/completions   POST /r/{id}/v1/completions   GET /r/{id}/v1/models   POST /r/{id}/events
  POST /r/{id}/v1/messages   POST /r/{id}/v1/messages/count_tokens   (Anthropic Messages, translated)
  POST /r/{id}/v1/responses   (OpenAI Responses, translated)
  GET|PUT /r/{id}/artifacts/{name}   (opaque bytes of the rollout's current attempt)
The credential is `Authorization: Bearer <key>` or `x-api-key: <key>` (Anthropic's header) on every path. Errors on
a translated protocol's paths are in that protocol's shape (its adapter's `error_body`).
"""

from __future__ import annotations

import logging
import time

import orjson
from pydantic import ValidationError

from gateway import strict_json
from gateway.answer_pace import AnswerPace
from gateway.artifacts import check_name
from gateway.asgi import header, json_object, read_body, send_bytes, send_error
from gateway.auth import Principal, Role, check_key_attempt, harness_authorization
from gateway.context import GatewayContext
from gateway.continuation import earlier_conversation
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
from gateway.nul_text import refuse_nul
from gateway.protocols import anthropic, responses
from gateway.protocols.base import ProtocolAdapter
from gateway.proxy import (
    CHAT,
    COMPLETION,
    CallContext,
    forward_stream,
    forward_unary,
    parse_request,
    upstream_request,
)
from gateway.recorded_turns import recorded_prompt, with_recorded
from gateway.records import TERMINAL_STATES, EventIn, EventKind, ModelRecord, RolloutState, SamplingRecord
from gateway.request_bytes import Held
from gateway.routing import is_side_call
from gateway.sampling import apply_policy, requested_sampling, seed_record, seeded_body
from gateway.store_roles import RolloutBrief
from gateway.translated import count_tokens, forward, prepare

log = logging.getLogger("harnessrl.gateway")
PROXY_KINDS = {("v1", "chat", "completions"): CHAT, ("v1", "completions"): COMPLETION}
TRANSLATED: dict[tuple[str, ...], ProtocolAdapter] = {("v1", "messages"): anthropic.ADAPTER,
                                                       ("v1", "responses"): responses.RESPONSES}
"""Harness protocols served by translation to chat completions: path under /r/{id}/ -> adapter. A path below one
of these (e.g. /v1/messages/count_tokens) answers its errors in that adapter's shape too."""
COUNT_TOKENS = ("v1", "messages", "count_tokens")


async def handle_harness(svc: GatewayContext, scope: dict, receive, send) -> None:
    """Entry point for every request whose path starts with /r/: every error is answered OpenAI-shaped (when the
    answer has not begun; a stream under way ends the way the proxy ends it)."""
    started = False
    paced = AnswerPace.of(scope).paced(send)  # a client too slow to read its answer is dropped

    async def tracked(message: dict) -> None:
        nonlocal started
        started = started or message["type"] == "http.response.start"
        await paced(message)

    try:
        await _dispatch(svc, scope, receive, tracked)
    except GatewayError as error:
        if started:
            raise
        await _send_error(scope, send, error)
    except Exception as exc:
        log.exception("unexpected error on %s %s", scope["method"], scope["path"])
        if started:
            raise
        await _send_error(scope, send, InternalError(f"the gateway failed on this request ({type(exc).__name__}); "
                                                     "this is a bug of the gateway, reported in its log"))


def _protocol_of(path: str) -> ProtocolAdapter | None:
    """The translated protocol whose path `path` is or lies below, if any."""
    rest = tuple(path.strip("/").split("/")[2:])
    return next((adapter for prefix, adapter in TRANSLATED.items() if rest[:len(prefix)] == prefix), None)


async def _send_error(scope: dict, send, error: GatewayError) -> None:
    """An error answer: OpenAI-shaped, or in the shape of the translated protocol the path belongs to."""
    adapter = _protocol_of(scope["path"])
    if adapter is None:
        await send_error(send, error)
        return
    headers = [(name.encode(), value.encode()) for name, value in error.headers().items()]
    await send_bytes(send, error.status, adapter.error_body(error.status, error.message, error.code), headers)


def _credential(scope: dict) -> str | None:
    return harness_authorization(header(scope, b"authorization"), header(scope, b"x-api-key"))


async def _dispatch(svc: GatewayContext, scope: dict, receive, send) -> None:
    parts = scope["path"].strip("/").split("/")
    if len(parts) < 3 or not parts[1]:
        raise NotFound(f"no route {scope['path']!r}; harness paths are /r/{{rollout_id}}/v1/...")
    with svc.request_bytes.holding(parts[1]) as held:  # the body, charged to the rollout until this returns
        counted = held.counting(receive, lambda: _declared_bytes(scope, svc.config.max_body_bytes))
        await _route(svc, scope, held, counted, send, parts[1], tuple(parts[2:]))


def _declared_bytes(scope: dict, max_body_bytes: int) -> int:
    """The body's Content-Length when it is one the route will read (read_body refuses a larger or malformed one)."""
    declared = header(scope, b"content-length")
    return int(declared) if declared is not None and declared.isdigit() and int(declared) <= max_body_bytes else 0


async def _route(svc: GatewayContext, scope: dict, held: Held, receive, send, rollout_id: str,
                 rest: tuple[str, ...]) -> None:
    method = scope["method"]
    kind = PROXY_KINDS.get(rest)
    adapter = TRANSLATED.get(rest)
    artifact = len(rest) == 2 and rest[0] == "artifacts"
    if kind is not None and method == "POST":
        await _proxy(svc, scope, held, receive, send, rollout_id, kind)
    elif adapter is not None and method == "POST":
        await _translated(svc, scope, held, receive, send, rollout_id, adapter)
    elif rest == COUNT_TOKENS and method == "POST":
        await _count_tokens(svc, scope, held, receive, send, rollout_id)
    elif rest == ("v1", "models") and method == "GET":
        svc.auth.require_rollout(_credential(scope), rollout_id)
        await (_anthropic_models if header(scope, b"anthropic-version") else _models)(svc, send)
    elif rest == ("events",) and method == "POST":
        await _post_event(svc, scope, held, receive, send, rollout_id)
    elif artifact and method in ("GET", "PUT"):
        await _artifact(svc, scope, receive, send, rollout_id, rest[1])
    elif kind is not None or adapter is not None or artifact or rest in (("v1", "models"), ("events",), COUNT_TOKENS):
        raise MethodNotAllowed(f"method {method} is not allowed on {scope['path']}")
    else:
        translated = "".join(f", /{'/'.join(path)}" for path in TRANSLATED)
        raise NotFound(f"no route {scope['path']!r}; harness paths are /r/{{rollout_id}}/v1/chat/completions, "
                       f"/v1/completions{translated}, /v1/messages/count_tokens, /v1/models, /events and "
                       "/artifacts/{name}")


async def _proxy(svc: GatewayContext, scope: dict, held: Held, receive, send, rollout_id: str, kind: str) -> None:
    started, created_at = time.perf_counter(), time.time()
    principal = svc.auth.require_rollout(_credential(scope), rollout_id)
    raw, brief = await _call_body(svc, scope, held, receive, principal, rollout_id)
    request = parse_request(raw, kind)
    endpoint = svc.router.pick(request.get("model"), rollout_id)
    forwarded, sampling = apply_policy(request, requested_sampling(request), brief.mode, svc.config.sampling)
    ctx = await _call_context(svc, brief, rollout_id, kind, request, raw, endpoint, started, created_at,
                              header(scope, b"traceparent"), sampling, held)
    body = upstream_request(seeded_body(forwarded, ctx.sampling), kind, brief.mode, endpoint.served_name)
    await (forward_stream if ctx.stream else forward_unary)(svc, ctx, body, send)


async def _call_context(svc: GatewayContext, brief: RolloutBrief, rollout_id: str, kind: str, request: dict,
                        raw: bytes, endpoint: ModelRecord, started: float, created_at: float,
                        traceparent: str | None = None, sampling: SamplingRecord | None = None,
                        held: Held | None = None) -> CallContext:
    """The context of a call about to go upstream, with its arrival number and, for a seeded rollout, its seed in
    `sampling` (`gateway.sampling.seed_record`); QuotaExceeded (429) once the attempt has made
    `max_calls_per_attempt` calls; BadRequest (400) for a model name with a NUL. Every kind of call (chat,
    completion, translated) is built here, its body counted already (`_call_body`)."""
    model = str(request.get("model", ""))
    refuse_nul(model, "model")  # an identifier the harness sends: a NUL is its error (the store keeps none)
    seq = await svc.recorder_store.next_call_seq(rollout_id, brief.attempt)
    if seq >= svc.config.max_calls_per_attempt:
        raise QuotaExceeded(f"attempt {brief.attempt} of rollout {rollout_id!r} has made its "
                            f"{svc.config.max_calls_per_attempt} calls, the limit per attempt "
                            "(max_calls_per_attempt); nothing was forwarded")
    return CallContext(rollout_id=rollout_id, attempt=brief.attempt, seq=seq, kind=kind,
                       stream=bool(request.get("stream", False)), model=model, endpoint=endpoint, request_raw=raw,
                       created_at=created_at, started=started,
                       side=is_side_call(kind, model, svc.config.side_models), traceparent=traceparent,
                       sampling=seed_record(sampling, brief.sampling_seed, seq), held=held)


async def _translated(svc: GatewayContext, scope: dict, held: Held, receive, send, rollout_id: str,
                      adapter: ProtocolAdapter) -> None:
    """A call of a protocol the engine does not speak, translated to chat completions (`gateway.translated`)."""
    started, created_at = time.perf_counter(), time.time()
    principal = svc.auth.require_rollout(_credential(scope), rollout_id)
    raw, brief = await _call_body(svc, scope, held, receive, principal, rollout_id)
    request = adapter.parse(raw)
    endpoint = svc.router.pick(request.get("model"), rollout_id)
    # translated before the call takes a number: a request the adapter refuses leaves no gap in the calls' seq
    earlier = await earlier_conversation(svc, adapter, request, rollout_id, brief.attempt, held)
    chat = adapter.to_chat(request, earlier.turns)
    recorded = await recorded_prompt(svc, adapter, chat, rollout_id, brief.attempt, endpoint, held, len(raw)) \
        if svc.config.recorded_turns else None
    chat, sampling = apply_policy(with_recorded(chat, recorded), requested_sampling(request), brief.mode,
                                  svc.config.sampling)
    ctx = await _call_context(svc, brief, rollout_id, adapter.kind, request, raw, endpoint, started, created_at,
                              header(scope, b"traceparent"), sampling, held)
    call = prepare(adapter, request, seeded_body(chat, ctx.sampling), rollout_id=rollout_id, attempt=brief.attempt,
                   seq=ctx.seq, mode=brief.mode, served_name=endpoint.served_name, earlier=earlier.stored,
                   recorded=recorded)
    await forward(svc, ctx, call, send)


async def _count_tokens(svc: GatewayContext, scope: dict, held: Held, receive, send, rollout_id: str) -> None:
    """Anthropic's `count_tokens`: the prompt the engine would see for this request, counted by its tokenizer."""
    started, created_at = time.perf_counter(), time.time()
    principal = svc.auth.require_rollout(_credential(scope), rollout_id)
    raw, brief = await _call_body(svc, scope, held, receive, principal, rollout_id)
    request = anthropic.ADAPTER.parse_count(raw)
    chat = anthropic.ADAPTER.to_chat(request, [])
    endpoint = svc.router.pick(request.get("model"), rollout_id)
    ctx = await _call_context(svc, brief, rollout_id, anthropic.COUNT_KIND, request, raw, endpoint, started,
                              created_at, header(scope, b"traceparent"), held=held)
    await count_tokens(svc, ctx, anthropic.ADAPTER, chat, lambda count: {"input_tokens": count}, send)


async def _call_body(svc: GatewayContext, scope: dict, held: Held, receive, principal: Principal,
                     rollout_id: str) -> tuple[bytes, RolloutBrief]:
    """A call's body and its rollout's brief, checked before anything parses the body: the rollout live for the
    caller (409), its parse charged to the request (`Held.add`: 413 `request_too_costly`, 429, 503: refusals that
    leave nothing counted, as a client retries a 429) and the body counted against the attempt's
    `max_call_bytes_per_attempt` (413 `call_bytes_quota_exceeded`; it stays counted whatever happens to the call
    next), so that an attempt with no room left costs no parse, and no parse builds more than it is charged for."""
    raw = await read_body(scope, receive, svc.config.max_body_bytes)
    brief = await _live_brief(svc, principal, rollout_id, "calls are")
    held.add(strict_json.parse_bytes(raw), f"parsing this JSON body of {len(raw)} bytes")
    await svc.recorder_store.charge_call_bytes(rollout_id, brief.attempt, len(raw),
                                               svc.config.max_call_bytes_per_attempt, "request")
    return raw, brief


async def _live_brief(svc: GatewayContext, principal: Principal, rollout_id: str, what: str) -> RolloutBrief:
    """The rollout's brief once it is known to accept writes from this caller: not finished (409
    `rollout_finished`), and for a rollout key, its own attempt still live (409 `stale_attempt`). With several
    gateways on the store a refusal is checked again on a fresh read: the cached brief may predate a change another
    gateway made (a new attempt claimed there)."""
    brief = await svc.recorder_store.brief(rollout_id)
    try:
        _check_live(brief, principal, rollout_id, what)
    except Conflict:
        if not svc.recorder_store.shared:
            raise
        brief = await svc.recorder_store.brief(rollout_id, fresh=True)
        _check_live(brief, principal, rollout_id, what)
    return brief


def _check_live(brief: RolloutBrief, principal: Principal, rollout_id: str, what: str) -> None:
    if brief.state in TERMINAL_STATES:
        raise Conflict(f"rollout {rollout_id!r} is {brief.state}; {what} accepted only while it is queued or "
                       "running", code="rollout_finished")
    check_key_attempt(principal, rollout_id, brief.state, brief.attempt)
    if brief.state == RolloutState.QUEUED and brief.attempt > 0:  # requeued: no attempt runs (gateway.call_fence)
        raise Conflict(f"attempt {brief.attempt} of rollout {rollout_id!r} ended and the rollout waits for its next "
                       f"attempt; {what} accepted only while an attempt runs", code="stale_attempt")
    if brief.calls_closed:
        raise Conflict(f"the harness of attempt {brief.attempt} of rollout {rollout_id!r} ended: the controller closed "
                       f"its calls to grade them; {what} accepted only while the harness runs", code="stale_attempt")


async def _models(svc: GatewayContext, send) -> None:
    data = [{"id": name, "object": "model", "created": 0, "owned_by": "harnessrl"} for name in svc.router.names()]
    await send_bytes(send, 200, orjson.dumps({"object": "list", "data": data}))


async def _anthropic_models(svc: GatewayContext, send) -> None:
    """The model list in Anthropic's shape, for a client that sends `anthropic-version` (the `anthropic` SDK)."""
    names = svc.router.names()
    data = [{"type": "model", "id": name, "display_name": name, "created_at": "1970-01-01T00:00:00Z",
             "lifecycle": "active"} for name in names]
    await send_bytes(send, 200, orjson.dumps({"data": data, "has_more": False, "first_id": names[0] if names else None,
                                              "last_id": names[-1] if names else None}))


async def _post_event(svc: GatewayContext, scope: dict, held: Held, receive, send, rollout_id: str) -> None:
    principal = svc.auth.require_rollout(_credential(scope), rollout_id)
    raw = await read_body(scope, receive, svc.config.max_body_bytes)
    held.add(strict_json.parse_bytes(raw), f"parsing this JSON body of {len(raw)} bytes")
    try:
        event = EventIn.model_validate(json_object(raw))  # parsed as every harness body is (strict_json)
    except ValidationError as exc:
        raise BadRequest(f"invalid event: {exc.errors(include_url=False)}") from None
    if event.kind in (EventKind.REWARD, EventKind.STATE) and principal.role != Role.ADMIN:
        raise Forbidden(f"a harness may not post {event.kind} events; rewards come from the grader")
    brief = await _live_brief(svc, principal, rollout_id, "events are")
    stored = await svc.recorder_store.add_event(rollout_id, event.kind, event.payload, attempt=brief.attempt,
                                       quota_bytes=svc.config.max_event_bytes_per_attempt)
    await send_bytes(send, 200, stored.model_dump_json().encode())


async def _artifact(svc: GatewayContext, scope: dict, receive, send, rollout_id: str, name: str) -> None:
    """GET or PUT one artifact of the caller's own rollout; a finished rollout refuses PUTs (409)."""
    principal = svc.auth.require_rollout(_credential(scope), rollout_id)
    check_name(name)
    if scope["method"] == "GET":
        brief = await svc.recorder_store.brief(rollout_id)
        check_key_attempt(principal, rollout_id, brief.state, brief.attempt, live=False)
        size = await svc.artifact_store.artifact_size(rollout_id, name, None)  # NotFound before a read is admitted
        async with svc.artifact_reads.reading(rollout_id, size) as read:  # before the artifact is in memory
            data = await svc.artifact_store.get_artifact(rollout_id, name, None)
            read.loaded(len(data))
            await send_bytes(send, 200, data, content_type=b"application/octet-stream")  # in pieces: read by then
        return
    brief = await _live_brief(svc, principal, rollout_id, "artifacts are")
    raw = await read_body(scope, receive, svc.config.max_body_bytes)
    stored = await svc.artifact_store.put_artifact(rollout_id, name, raw, refuse_finished=True, attempt=brief.attempt,
                                          quota_bytes=svc.config.max_artifact_bytes_per_attempt)
    await send_bytes(send, 200, stored.model_dump_json().encode())
