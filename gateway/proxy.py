"""Forward one harness call upstream, capture its tokens, record it durably, and answer the harness.

The path is lean: the body is parsed once (orjson), only the fields the gateway relies on are checked, the fields
`gateway.request_fields` refuses are refused before the call is numbered (the rest are screened by
`gateway.sampling.apply_policy`: only the table's forwarded fields reach the engine), and the upstream answer is
returned byte for byte. A call is recorded before its answer completes, so every answer the
harness received is in the store.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.asgi import json_object, send_bytes, send_error
from gateway.capture import Captured, ProtocolError, capture_bytes, capture_sse, parse_version_header
from gateway.context import GatewayContext
from gateway.errors import BadRequest, GatewayError, UpstreamProtocolError, UpstreamUnavailable, error_body
from gateway.records import CallErrorCode, CallStatus, ModelRecord, RolloutMode, SamplingRecord
from gateway.request_bytes import Held
from gateway.request_fields import CHAT, COMPLETION, check_refused
from gateway.tokens import pack_extra_choices, pack_floats, pack_ids, pack_sampling
from gateway.upstream import AnswerRefused, UpstreamFailed, answer_timed_out, read_refused

PATHS = {CHAT: "/chat/completions", COMPLETION: "/completions"}
DONE_TOKEN = b"[DONE]"  # the final SSE event is `data: [DONE]`


def parse_request(raw: bytes, kind: str) -> dict[str, Any]:
    """The harness's JSON body, with the fields the gateway relies on type-checked and none it refuses
    (`gateway.request_fields`: 400 naming the field)."""
    body = json_object(raw)
    if kind == CHAT and (not isinstance(body.get("messages"), list) or not body["messages"]):
        raise BadRequest("'messages' must be a non-empty list of messages", param="messages")
    if kind == COMPLETION and not isinstance(body.get("prompt"), (str, list)):
        raise BadRequest("'prompt' must be a string or a list of token IDs", param="prompt")
    if not isinstance(body.get("stream", False), bool):
        raise BadRequest("'stream' must be a boolean", param="stream")
    if not isinstance(body.get("model", ""), str):
        raise BadRequest("'model' must be a string", param="model")
    check_refused(body, kind)
    return body


def upstream_request(body: dict[str, Any], kind: str, mode: RolloutMode, served_name: str) -> bytes:
    """The body sent upstream: token IDs always forced, logprobs forced in train mode, model renamed (its sampling
    parameters are set before, by `gateway.sampling.apply_policy`)."""
    forwarded = dict(body)
    forwarded["model"] = served_name
    forwarded["return_token_ids"] = True
    if mode == RolloutMode.TRAIN:
        if kind == CHAT:
            forwarded["logprobs"] = True
        elif forwarded.get("logprobs") is None:
            forwarded["logprobs"] = 0
    return orjson.dumps(forwarded)


@dataclass(frozen=True)
class CallContext:
    """What is known about a call before it goes upstream."""

    rollout_id: str
    attempt: int
    seq: int
    kind: str
    stream: bool
    model: str
    endpoint: ModelRecord
    request_raw: bytes
    created_at: float
    started: float
    side: bool = False  # a harness's side call (gateway.routing.is_side_call)
    traceparent: str | None = None  # the W3C trace context the harness sent (the parent of the call's span)
    sampling: SamplingRecord | None = None  # what the engine was asked to sample with (gateway.sampling); None: nothing
    held: Held | None = None  # the request's charge (gateway.request_bytes), which its answer joins; None: not charged


ANSWER_WHAT = "the engine's answer (the request's n, max_tokens and top_logprobs decide its size)"
SHORTER_ANSWER = "ask for a shorter answer (a lower max_tokens, n or top_logprobs) or raise that limit"
STREAM_TIMES = 5
"""What a streamed answer holds per byte as it arrives: its chunks, once joined, split into events, what is
captured of them, and the stored copy (an attack review measured 4.7 times on chat with n 16; a translated stream
also keeps its events, about 1.5 times)."""
ANSWER_PARSE_TIMES = 16
"""The most a unary answer of the engine's takes parsed, per byte: its shape is the engine's (the harness decides
only how many tokens, choices and alternatives), measured at 9.6 times its size with logprobs and 11.9 with 20
top_logprobs a token (peak RSS over the answer; `strict_json.parse_bytes`, the bound for any body, says 28)."""


def answer_charge(held: Held | None, times: int = 1) -> Callable[[int], None] | None:
    """Charges `times` each piece of the engine's answer to the request `held` as it arrives (`Held.add`); a
    refusal is raised as `AnswerRefused` (the read stops: a call is recorded as `answer_too_large`)."""
    if held is None:
        return None

    def charge(size_bytes: int) -> None:
        try:
            held.add(times * size_bytes, ANSWER_WHAT, SHORTER_ANSWER)
        except GatewayError as exc:
            raise AnswerRefused(exc) from None
    return charge


def charge_parse(held: Held | None, payload: bytes) -> None:
    """Charge the parse of a whole answer before it is parsed (`AnswerRefused` when refused)."""
    if (charge := answer_charge(held, ANSWER_PARSE_TIMES)) is not None:
        charge(len(payload))


def call_row(ctx: CallContext, cap: Captured, *, status: CallStatus, http_status: int, error: str | None,
             response_raw: bytes | None, policy_version: int | None, error_code: CallErrorCode | None = None,
             continuation: bytes | None = None, recorded_prefix: int | None = None) -> dict[str, Any]:
    """The store row of one call (`error_code`: what went wrong, by who caused it; None for a clean answer;
    `continuation`: what a later call continuing the answer starts from, `gateway.continuation`; `recorded_prefix`:
    prompt tokens from the attempt's records, `gateway.recorded_turns`)."""
    return {
        "rollout_id": ctx.rollout_id, "attempt": ctx.attempt, "seq": ctx.seq, "kind": ctx.kind,
        "stream": ctx.stream, "model": ctx.model, "upstream": ctx.endpoint.base_url, "status": status.value,
        "http_status": http_status, "error": error, "error_code": error_code.value if error_code else None,
        "request": ctx.request_raw, "response_raw": response_raw,
        "response_id": cap.response_id,
        "prompt_token_ids": pack_ids(cap.prompt_token_ids) if cap.prompt_ids_packed is None else cap.prompt_ids_packed,
        "response_token_ids": pack_ids(cap.response_token_ids),
        "response_logprobs": pack_floats(cap.response_logprobs), "response_text": cap.response_text or None,
        "finish_reason": cap.finish_reason, "n_choices": cap.n_choices,
        "extra_choices": pack_extra_choices(cap), "side": ctx.side, "sampling": pack_sampling(_sampled(ctx, cap)),
        "policy_version": policy_version,
        "latency_ms": (time.perf_counter() - ctx.started) * 1000, "created_at": ctx.created_at,
        "continuation": continuation, "recorded_prefix": recorded_prefix,
    }


async def record_call(svc: GatewayContext, ctx: CallContext, row: dict[str, Any]) -> None:
    """Store the call's row and, when the gateway exports OpenTelemetry, report its span (recorded or not). The
    answer's bytes are counted against the attempt's `max_call_bytes_per_attempt` first: past it the row is not
    stored (PayloadTooLarge, 413 `call_bytes_quota_exceeded`)."""
    recorded = False
    try:
        answer_bytes = len(row.get("response_raw") or b"") + len(row.get("continuation") or b"")
        await svc.recorder_store.charge_call_bytes(row["rollout_id"], row["attempt"], answer_bytes,
                                                   svc.config.max_call_bytes_per_attempt, "answer")
        await svc.recorder_store.insert_call(row)
        recorded = True
    finally:
        if svc.telemetry is not None:
            svc.telemetry.call_span(row, ctx.traceparent, recorded=recorded)


def _version(cap: Captured, header_value: str | None, fallback: int) -> int:
    """The answer's policy version: its body's, else its header's, else the endpoint's (ProtocolError on a bad
    header)."""
    if cap.policy_version is not None:
        return cap.policy_version
    parsed = parse_version_header(header_value)
    return fallback if parsed is None else parsed


def _answer_headers(ctx: CallContext, version: int) -> list[tuple[bytes, bytes]]:
    return [(b"x-policy-version", str(version).encode()), (b"x-harnessrl-call-seq", str(ctx.seq).encode())]


async def forward_unary(svc: GatewayContext, ctx: CallContext, body: bytes, send) -> None:
    """Forward a non-streamed call; it counts as in flight until the harness has its answer."""
    url = ctx.endpoint.base_url + PATHS[ctx.kind]
    async with svc.gate.admit():
        try:
            status, version_header, payload = await svc.upstream.request(url, body, answer_charge(ctx.held))
            charge_parse(ctx.held, payload)
        except UpstreamFailed as exc:
            await _record_failure(svc, ctx, exc, send)
            return
        except AnswerRefused as refused:
            await _record_refused_answer(svc, ctx, refused.error, send)
            return
        cap = _capture_unary(status, payload)
        try:
            version = _version(cap, version_header, ctx.endpoint.version)
        except ProtocolError as exc:
            cap, version = Captured(error=f"the upstream's answer breaks the protocol: {exc}", broken=True), None
        if cap.broken or status >= 500:
            await _record_protocol_failure(svc, ctx, status, cap.error, payload, send)
            return
        failed = status != 200 or cap.error is not None
        error = (cap.error or payload[:2000].decode("utf-8", "replace")) if failed else None
        await record_call(svc, ctx, call_row(ctx, cap, status=CallStatus.ERROR if failed else CallStatus.OK,
                                             http_status=status, error=error, response_raw=payload,
                                             policy_version=version,
                                             error_code=CallErrorCode.UPSTREAM_ERROR if failed else None))
        await send_bytes(send, status, payload, _answer_headers(ctx, version))  # in pieces: read by the end


def _capture_unary(status: int, payload: bytes) -> Captured:
    return capture_bytes(payload) if status == 200 else Captured()


async def _record_protocol_failure(svc: GatewayContext, ctx: CallContext, status: int, problem: str | None,
                                   payload: bytes, send) -> None:
    """An answer that breaks the protocol, or an upstream 5xx: recorded as an upstream error, answered 502."""
    reason = problem or f"the upstream answered HTTP {status}: {payload[:500].decode('utf-8', 'replace')}"
    error = UpstreamProtocolError(f"{reason} (upstream {ctx.endpoint.base_url}); the answer was not used")
    await record_call(svc, ctx, call_row(ctx, Captured(), status=CallStatus.ERROR, http_status=error.status,
                                         error=reason, response_raw=payload, policy_version=None,
                                         error_code=CallErrorCode.UPSTREAM_PROTOCOL_ERROR))
    await send_error(send, error)


def failure_code(exc: UpstreamFailed) -> CallErrorCode:
    """The recorded code of an upstream call that got no answer: the answer ran past the timeout (its length is the
    policy's), or the engine could not be reached."""
    return CallErrorCode.UPSTREAM_TIMEOUT if exc.timed_out else CallErrorCode.UPSTREAM_UNAVAILABLE


def failure_message(exc: UpstreamFailed) -> str:
    """What the harness is told about an upstream call that got no answer."""
    if exc.timed_out:
        return f"{exc}; the answer took longer than the gateway's upstream_timeout_s"
    return f"{exc}; the engine did not answer, try again later" if exc.retryable else str(exc)


async def _record_refused_answer(svc: GatewayContext, ctx: CallContext, error: GatewayError, send) -> None:
    """An answer too large for the request's share, read no further: recorded as `answer_too_large`, the harness
    answered with the refusal (413, or 429 / 503 when other requests hold the share)."""
    await record_call(svc, ctx, call_row(ctx, Captured(), status=CallStatus.ERROR, http_status=error.status,
                                         error=error.message, response_raw=None, policy_version=None,
                                         error_code=CallErrorCode.ANSWER_TOO_LARGE))
    await send_error(send, type(error)(error.message, code=CallErrorCode.ANSWER_TOO_LARGE.value))


async def _record_failure(svc: GatewayContext, ctx: CallContext, exc: UpstreamFailed, send) -> None:
    code = failure_code(exc)
    error = UpstreamUnavailable(failure_message(exc), code=code.value)
    await record_call(svc, ctx, call_row(ctx, Captured(), status=CallStatus.ERROR, http_status=error.status,
                                         error=str(exc), response_raw=exc.body, policy_version=None,
                                         error_code=code))
    await send({"type": "http.response.start", "status": error.status,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": error.body()})


def _sampled(ctx: CallContext, cap: Captured) -> SamplingRecord | None:
    """The call's sampling record, with the engine's forced opening when it reported one (`Captured`)."""
    if ctx.sampling is None or cap.forced_prompt_tokens is None:
        return ctx.sampling
    return ctx.sampling.model_copy(update={"forced_prompt_tokens": cap.forced_prompt_tokens})


async def forward_stream(svc: GatewayContext, ctx: CallContext, body: bytes, send) -> None:
    """Forward a streamed call chunk by chunk; the final `[DONE]` is sent only after the call is recorded."""
    url = ctx.endpoint.base_url + PATHS[ctx.kind]
    async with svc.gate.admit():
        try:
            response = await svc.upstream.open_stream(url, body)
        except UpstreamFailed as exc:
            await _record_failure(svc, ctx, exc, send)
            return
        try:
            await _relay(svc, ctx, response, send)
        finally:
            response.release()


async def _relay(svc: GatewayContext, ctx: CallContext, response, send) -> None:
    status = response.status
    try:
        header_version = parse_version_header(response.headers.get("x-policy-version"))
    except ProtocolError as exc:
        await _record_protocol_failure(svc, ctx, status, f"the upstream's answer breaks the protocol: {exc}",
                                       await read_refused(response), send)
        return
    if status >= 500:
        await _record_protocol_failure(svc, ctx, status, None, await response.read(), send)
        return
    content_type = response.headers.get("content-type", "text/event-stream").encode()
    version = ctx.endpoint.version if header_version is None else header_version
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"cache-control", b"no-cache"),
                            *_answer_headers(ctx, version)]})
    received, held, broke = await _pass_through(response, send, answer_charge(ctx.held, STREAM_TIMES))
    raw = b"".join(received)
    cap = capture_sse(raw) if status == 200 else Captured(error=raw[:2000].decode("utf-8", "replace"))
    if broke is None and cap.broken:
        held = _error_event(cap.error or "broken stream", CallErrorCode.UPSTREAM_PROTOCOL_ERROR)
    error, code = stream_failure(broke, cap, status)
    try:
        await record_call(svc, ctx, call_row(
            ctx, cap, status=CallStatus.ERROR if error or status != 200 else CallStatus.OK, http_status=status,
            error=error, response_raw=raw, policy_version=cap.policy_version if cap.policy_version is not None
            else version, error_code=code))
    except GatewayError as exc:  # not recorded: the harness must not take the answer as final
        held = _error_event(exc.message, exc.code or "store_unavailable")
    await send({"type": "http.response.body", "body": held, "more_body": False})


def stream_failure(broke: tuple[str, CallErrorCode] | None, cap: Captured,
                   status: int) -> tuple[str | None, CallErrorCode | None]:
    """(error, code) of a relayed stream: it broke off (`broke`), broke the protocol, was refused (a 4xx) or carried
    the engine's own error chunk; (None, None) when it is clean."""
    if broke is not None:
        return broke
    if cap.broken:
        return cap.error, CallErrorCode.UPSTREAM_PROTOCOL_ERROR
    if status != 200 or cap.error is not None:
        return cap.error, CallErrorCode.UPSTREAM_ERROR
    return None, None


def stream_broke(exc: Exception) -> tuple[str, CallErrorCode]:
    """(error, code) of an upstream stream that ended with `exc` before its end: cut by the total timeout (the
    answer's length is the policy's), else dropped by the engine."""
    if answer_timed_out(exc):
        return f"upstream stream ran past the timeout: {type(exc).__name__}: {exc}", CallErrorCode.UPSTREAM_TIMEOUT
    return f"upstream stream broke: {type(exc).__name__}: {exc}", CallErrorCode.STREAM_BROKEN


def _error_event(message: str, code: str) -> bytes:
    return b"data: " + error_body(message, "upstream_error", code=code) + b"\n\n"


async def _pass_through(response, send, charge: Callable[[int], None] | None = None,
                        ) -> tuple[list[bytes], bytes, tuple[str, CallErrorCode] | None]:
    """Relay the stream's complete lines as they come, holding back the line with `[DONE]` and everything after it
    (and any incomplete last line), each chunk charged first (`answer_charge`): (every chunk received, the bytes
    held back, (why the stream broke, its code) or None)."""
    received: list[bytes] = []
    pending = b""
    done = False
    try:
        async for chunk in response.content.iter_any():
            if charge is not None:
                charge(len(chunk))
            received.append(chunk)
            if done:
                pending += chunk
                continue
            ready, pending, done = split_held(pending + chunk)
            if ready:
                await send({"type": "http.response.body", "body": ready, "more_body": True})
    except GatewayError:
        raise
    except AnswerRefused as refused:  # read no further: the engine's generation is dropped with the response
        broke = refused_broke(refused)
        return received, _error_event(*broke), broke
    except Exception as exc:  # the engine dropped the stream, or it ran past the timeout: record what came
        broke = stream_broke(exc)
        return received, _error_event(*broke), broke
    return received, pending, None


def refused_broke(refused: AnswerRefused) -> tuple[str, CallErrorCode]:
    """(error, code) of a stream whose answer was refused as it came (`answer_charge`)."""
    return f"the stream was cut: {refused.error.message}", CallErrorCode.ANSWER_TOO_LARGE


def split_held(data: bytes) -> tuple[bytes, bytes, bool]:
    """(what may be sent now, what is held back, whether the final event was seen): complete lines before the line
    holding `[DONE]` go now; that line and everything after it, or an incomplete last line, are held."""
    mark = data.find(DONE_TOKEN)
    if mark >= 0:
        start = data.rfind(b"\n", 0, mark) + 1
        return data[:start], data[start:], True
    end = data.rfind(b"\n") + 1
    return data[:end], data[end:], False
