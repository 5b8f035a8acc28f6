"""Forward one call of a harness protocol the engine does not speak (a `ProtocolAdapter`: Anthropic Messages, OpenAI
Responses) as chat completions, record it, and answer in the harness's protocol.

As for chat (`proxy.py`): the same forced fields upstream (`upstream_request`: token IDs, logprobs in train mode),
the tokens captured from the engine's own chat answer (`capture_json` / `capture_sse`), the call recorded before the
answer completes (a stream's closing events go out only after the commit), a broken answer or an engine 5xx recorded
and answered 502, an engine that does not answer recorded and answered 502, a store that cannot record answered 503,
each recorded with its `CallErrorCode`. An answer of the model's that the harness protocol cannot carry exactly (the
adapter's `model_fault`, e.g. Anthropic tool-call arguments that are not a JSON object) is the model's answer: the
adapter delivers it in a form the protocol allows (as text), recorded as an ok call with the fault's code, never a
502 (which the controller would count as the engine's failure).
Unlike chat, the recorded `response_raw` is the translated answer the harness saw (its JSON, or its SSE events), the
`response_id` is the adapter's id for it, every error is in the adapter's shape (`error_body`, or `error` events
once a stream has begun), and an ok answer is recorded with its continuation (`gateway.continuation`), for a call
that continues it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from gateway.asgi import send_bytes, send_last_body
from gateway.capture import (
    Captured,
    ProtocolError,
    capture_chunk,
    capture_json,
    parse_version_header,
    token_ids_packed,
)
from gateway.context import GatewayContext
from gateway.continuation import NONE_STORED, continuation
from gateway.errors import GatewayError
from gateway.protocols.base import ProtocolAdapter, StreamTranslator
from gateway.proxy import (
    CHAT,
    STREAM_TIMES,
    CallContext,
    answer_charge,
    call_row,
    charge_parse,
    failure_code,
    failure_message,
    record_call,
    refused_broke,
    stream_broke,
    upstream_request,
)
from gateway.records import CallErrorCode, CallStatus, RolloutMode
from gateway.upstream import AnswerRefused, UpstreamFailed, read_refused

if TYPE_CHECKING:
    from gateway.recorded_turns import RecordedPrompt

CHAT_PATH = "/chat/completions"
TOKENIZE_PATH = "/tokenize"  # vLLM's (and the embedded engine's): at the server root, not under /v1
UNTRANSLATABLE = (ProtocolError, TypeError, AttributeError, KeyError, ValueError)
"""What an adapter raises on an answer or chunk off the engine's shapes that capture does not check (ProtocolError;
the others e.g. for a tool call that is not an object): the engine's failure, recorded, answered 502. What the model
wrote never raises: the adapters deliver it (`model_fault`)."""


@dataclass(frozen=True)
class Translated:
    """One harness request ready to go upstream."""

    adapter: ProtocolAdapter
    body: dict[str, Any]  # the harness's request, parsed
    response_id: str  # the id the harness sees
    upstream_body: bytes  # the chat-completions request sent to the engine
    earlier: bytes = NONE_STORED  # the stored turns of the conversation it continues (gateway.continuation)
    recorded: RecordedPrompt | None = None  # the prompt given from the attempt's records (gateway.recorded_turns)


def prepare(adapter: ProtocolAdapter, body: dict[str, Any], chat: dict[str, Any], *, rollout_id: str, attempt: int,
            seq: int, mode: RolloutMode, served_name: str, earlier: bytes = NONE_STORED,
            recorded: RecordedPrompt | None = None) -> Translated:
    """The call for `body` (pure): `chat` (the adapter's `to_chat` of it, continuing the stored turns `earlier`;
    with the recorded prompt `recorded` when there is one) streamed as the harness asked, with chat's forced fields
    (`upstream_request`), and the answer's id."""
    return Translated(adapter, body, adapter.response_id(rollout_id, attempt, seq),
                      upstream_request({**chat, "stream": bool(body.get("stream", False))}, CHAT, mode, served_name),
                      earlier, recorded)


def recorded_prefix(call: Translated, cap: Captured) -> int | None:
    """The call's `recorded_prefix`: the recorded tokens it was given when the engine's prompt is the one sent, 0
    when the engine rendered the messages instead, None when it was given none."""
    if call.recorded is None:
        return None
    return call.recorded.recorded_tokens if cap.prompt_token_ids == call.recorded.prompt_token_ids else 0


def _headers(ctx: CallContext, version: int | None, content_type: bytes) -> list[tuple[bytes, bytes]]:
    headers = [(b"content-type", content_type), (b"x-harnessrl-call-seq", str(ctx.seq).encode())]
    return headers if version is None else [*headers, (b"x-policy-version", str(version).encode())]


async def _answer(send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    """A whole answer, a large one in pieces (`asgi.send_bytes`: the client has read all but the last by the end)."""
    content_type = next((value for name, value in headers if name == b"content-type"), b"application/json")
    await send_bytes(send, status, body, [(name, value) for name, value in headers if name != b"content-type"],
                     content_type=content_type)


async def _fail(svc: GatewayContext, ctx: CallContext, adapter: ProtocolAdapter, send, *, status: int,
                code: CallErrorCode, reason: str, message: str, cap: Captured | None = None) -> None:
    """Record the call as an error (the harness's error body as its answer) and answer it."""
    body = adapter.error_body(status, message, code)
    await record_call(svc, ctx, call_row(ctx, cap or Captured(), status=CallStatus.ERROR, http_status=status,
                                         error=reason, response_raw=body, policy_version=None, error_code=code))
    await _answer(send, status, body, _headers(ctx, None, b"application/json"))


async def _upstream_failed(svc: GatewayContext, ctx: CallContext, adapter: ProtocolAdapter, send,
                           exc: UpstreamFailed) -> None:
    await _fail(svc, ctx, adapter, send, status=502, code=failure_code(exc), reason=str(exc),
                message=failure_message(exc))


async def _broken(svc: GatewayContext, ctx: CallContext, adapter: ProtocolAdapter, send, status: int,
                  problem: str | None, payload: bytes) -> None:
    reason = problem or f"the upstream answered HTTP {status}: {payload[:500].decode('utf-8', 'replace')}"
    await _fail(svc, ctx, adapter, send, status=502, code=CallErrorCode.UPSTREAM_PROTOCOL_ERROR, reason=reason,
                message=f"{reason} (upstream {ctx.endpoint.base_url}); the answer was not used")


async def _refused(svc: GatewayContext, ctx: CallContext, adapter: ProtocolAdapter, send, status: int,
                   payload: bytes, cap: Captured) -> None:
    """The engine refused the request (a 4xx, or an error in a 200 body): recorded, its status and message passed
    on."""
    reason = cap.error or _upstream_message(payload)
    await _fail(svc, ctx, adapter, send, status=status if 400 <= status < 500 else 502,
                code=CallErrorCode.UPSTREAM_ERROR,
                reason=reason, message=f"the engine refused the request: {reason}", cap=cap)


def _upstream_message(payload: bytes) -> str:
    try:
        error = orjson.loads(payload).get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
    except (orjson.JSONDecodeError, AttributeError):
        pass
    return payload[:2000].decode("utf-8", "replace")


def _version(cap: Captured, header_value: str | None, fallback: int) -> int:
    if cap.policy_version is not None:
        return cap.policy_version
    parsed = parse_version_header(header_value)
    return fallback if parsed is None else parsed


async def forward(svc: GatewayContext, ctx: CallContext, call: Translated, send) -> None:
    """Forward one translated call, unary or streamed as `ctx.stream` says; it is in flight until answered."""
    url = ctx.endpoint.base_url + CHAT_PATH
    async with svc.gate.admit():
        if not ctx.stream:
            try:
                status, version_header, payload = await svc.upstream.request(url, call.upstream_body,
                                                                             answer_charge(ctx.held))
                charge_parse(ctx.held, payload)
            except UpstreamFailed as exc:
                await _upstream_failed(svc, ctx, call.adapter, send, exc)
                return
            except AnswerRefused as refused:
                error = refused.error
                await _fail(svc, ctx, call.adapter, send, status=error.status, code=CallErrorCode.ANSWER_TOO_LARGE,
                            reason=error.message, message=error.message)
                return
            await _unary(svc, ctx, call, send, status, version_header, payload)
            return
        try:
            response = await svc.upstream.open_stream(url, call.upstream_body)
        except UpstreamFailed as exc:
            await _upstream_failed(svc, ctx, call.adapter, send, exc)
            return
        try:
            await _relay(svc, ctx, call, response, send)
        finally:
            response.release()


async def _unary(svc: GatewayContext, ctx: CallContext, call: Translated, send, status: int,
                 version_header: str | None, payload: bytes) -> None:
    adapter = call.adapter
    try:
        decoded = orjson.loads(payload) if status == 200 else None
        cap = capture_json(decoded) if status == 200 else Captured()
        version = _version(cap, version_header, ctx.endpoint.version)
    except (orjson.JSONDecodeError, ProtocolError) as exc:
        await _broken(svc, ctx, adapter, send, status, f"the upstream's answer breaks the protocol: {exc}", payload)
        return
    if cap.broken or status >= 500:
        await _broken(svc, ctx, adapter, send, status, cap.error, payload)
        return
    if status != 200 or cap.error is not None:
        await _refused(svc, ctx, adapter, send, status, payload, cap)
        return
    try:
        answer = orjson.dumps(adapter.from_chat(decoded, call.body, call.response_id))
        fault = adapter.model_fault(decoded)
    except UNTRANSLATABLE as exc:
        await _broken(svc, ctx, adapter, send, status, f"the upstream's answer cannot be translated: {exc}", payload)
        return
    cap.response_id = call.response_id
    await record_call(svc, ctx, call_row(ctx, cap, status=CallStatus.OK, http_status=200,
                                         error=fault.message if fault else None, response_raw=answer,
                                         policy_version=version, error_code=fault.code if fault else None,
                                         continuation=continuation(adapter, call.body, call.earlier, answer),
                                         recorded_prefix=recorded_prefix(call, cap)))
    await _answer(send, 200, answer, _headers(ctx, version, b"application/json"))


async def _relay(svc: GatewayContext, ctx: CallContext, call: Translated, response, send) -> None:
    status, adapter = response.status, call.adapter
    try:
        header_version = parse_version_header(response.headers.get("x-policy-version"))
    except ProtocolError as exc:
        await _broken(svc, ctx, adapter, send, status, f"the upstream's answer breaks the protocol: {exc}",
                      await read_refused(response))
        return
    if status >= 500:
        await _broken(svc, ctx, adapter, send, status, None, await response.read())
        return
    if status != 200:
        payload = await response.read()
        await _refused(svc, ctx, adapter, send, status, payload, Captured())
        return
    version = ctx.endpoint.version if header_version is None else header_version
    await send({"type": "http.response.start", "status": 200,
                "headers": [*_headers(ctx, version, b"text/event-stream"), (b"cache-control", b"no-cache")]})
    translator = adapter.stream(call.body, call.response_id)
    cap, sent, problem = await _translate(response, translator, send, answer_charge(ctx.held, STREAM_TIMES))
    events, failure = _closing(translator, problem)
    fault = translator.model_fault if failure is None else None
    error, code = failure or ((fault.message, fault.code) if fault else (None, None))
    cap.response_id = call.response_id
    answer = b"".join(sent) + events
    try:
        await record_call(svc, ctx, call_row(
            ctx, cap, status=CallStatus.ERROR if failure else CallStatus.OK, http_status=200, error=error,
            response_raw=answer, error_code=code,
            policy_version=cap.policy_version if cap.policy_version is not None else version,
            continuation=None if failure else continuation(adapter, call.body, call.earlier, answer),
            recorded_prefix=recorded_prefix(call, cap)))
    except GatewayError as exc:  # not recorded: the harness must not take the answer as final
        events = translator.error(exc.message, exc.code or "store_unavailable")
    await send_last_body(send, events)  # Responses' closing events repeat the whole text: in pieces


Problem = tuple[str, CallErrorCode]
"""Why a translated stream failed, and its code."""


def _closing(translator: StreamTranslator, problem: Problem | None) -> tuple[bytes, Problem | None]:
    """(the closing events, (why the stream failed, its code) or None): the translator's closing events, or an error
    event when the stream stopped early (`problem`) or cannot close validly."""
    if problem is not None:
        return translator.error(*problem), problem
    try:
        return translator.finish(), None
    except UNTRANSLATABLE as exc:
        failed = (f"the upstream's answer cannot be translated: {exc}", CallErrorCode.UPSTREAM_PROTOCOL_ERROR)
        return translator.error(*failed), failed


async def _translate(response, translator: StreamTranslator, send,
                     charge: Callable[[int], None] | None = None) -> tuple[Captured, list[bytes], Problem | None]:
    """Capture the upstream's chunks (each charged first, `answer_charge`), feed them to the translator and send its
    events as they come: (what was captured, the events sent, (why the stream stopped early, its error code) or
    None)."""
    cap = Captured()
    sent: list[bytes] = []
    pending = b""
    try:
        async for data in response.content.iter_any():
            if charge is not None:
                charge(len(data))
            lines = (pending + data).split(b"\n")
            pending = lines.pop()
            for line in lines:
                problem = await _feed_line(line, cap, translator, sent, send)
                if problem is not None:
                    return cap, sent, problem
    except GatewayError:
        raise
    except AnswerRefused as refused:  # read no further: the engine's generation is dropped with the response
        return cap, sent, refused_broke(refused)
    except Exception as exc:  # the engine dropped the stream, or it ran past the timeout: record what came
        return cap, sent, stream_broke(exc)
    return cap, sent, await _feed_line(pending, cap, translator, sent, send)


async def _feed_line(line: bytes, cap: Captured, translator: StreamTranslator, sent: list[bytes],
                     send) -> Problem | None:
    """One SSE line of the upstream: captured (as `capture_sse` would) and translated; (reason, code) when the stream
    cannot go on."""
    if not line.startswith(b"data:"):
        return None
    payload = line[5:].strip()
    if not payload or payload == b"[DONE]":
        return None
    try:
        chunk = orjson.loads(payload)
    except orjson.JSONDecodeError:
        cap.error = f"the upstream's answer breaks the protocol: undecodable stream chunk: {payload[:200]!r}"
        cap.broken = True
        return cap.error, CallErrorCode.UPSTREAM_PROTOCOL_ERROR
    capture_chunk(cap, chunk)
    if cap.broken or cap.error is not None:  # off the protocol's shapes, or the engine's own error chunk
        return (cap.error or "broken stream",
                CallErrorCode.UPSTREAM_PROTOCOL_ERROR if cap.broken else CallErrorCode.UPSTREAM_ERROR)
    try:
        events = translator.feed(chunk)
    except UNTRANSLATABLE as exc:
        return (f"the upstream's answer breaks the protocol: {type(exc).__name__}: {exc}",
                CallErrorCode.UPSTREAM_PROTOCOL_ERROR)
    if events:
        sent.append(events)
        await send({"type": "http.response.body", "body": events, "more_body": True})
    return None


def tokenize_url(base_url: str) -> str:
    """The engine's tokenizer endpoint for an OpenAI base URL (`http://h:p/v1` -> `http://h:p/tokenize`)."""
    return base_url.rstrip("/").removesuffix("/v1") + TOKENIZE_PATH


async def count_tokens(svc: GatewayContext, ctx: CallContext, adapter: ProtocolAdapter, chat: dict[str, Any],
                       render: Callable[[int], dict[str, Any]], send) -> None:
    """Count the prompt `chat` renders to with the engine's own tokenizer and chat template (`POST /tokenize`),
    record the call (the prompt's token IDs, no response) and answer `render(count)`."""
    request = {"model": ctx.endpoint.served_name, "messages": chat["messages"], "add_generation_prompt": True}
    if chat.get("tools"):
        request["tools"] = chat["tools"]
    async with svc.gate.admit():
        try:
            status, version_header, payload = await svc.upstream.request(tokenize_url(ctx.endpoint.base_url),
                                                                         orjson.dumps(request), answer_charge(ctx.held))
            charge_parse(ctx.held, payload)  # one token id a prompt token: the prompt's tokenizer decides its size
        except UpstreamFailed as exc:
            await _upstream_failed(svc, ctx, adapter, send, exc)
            return
        except AnswerRefused as refused:
            error = refused.error
            await _fail(svc, ctx, adapter, send, status=error.status, code=CallErrorCode.ANSWER_TOO_LARGE,
                        reason=error.message, message=error.message)
            return
    if status >= 500:
        await _broken(svc, ctx, adapter, send, status, None, payload)
        return
    if status != 200:
        await _refused(svc, ctx, adapter, send, status, payload, Captured())
        return
    try:
        tokens = tokenized_ids(payload)
        version = _version(Captured(), version_header, ctx.endpoint.version)
    except ProtocolError as exc:
        await _broken(svc, ctx, adapter, send, status, f"the tokenizer's answer breaks the protocol: {exc}", payload)
        return
    answer = orjson.dumps(render(len(tokens)))
    await record_call(svc, ctx, call_row(ctx, Captured(prompt_token_ids=tokens), status=CallStatus.OK,
                                         http_status=200, error=None, response_raw=answer, policy_version=version))
    await _answer(send, 200, answer, _headers(ctx, version, b"application/json"))


def tokenized_ids(payload: bytes) -> list[int]:
    """The token IDs of a `/tokenize` answer (`{count, tokens, max_model_len}`); ProtocolError otherwise."""
    try:
        body = orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise ProtocolError("a 200 body that is not JSON") from None
    tokens = body.get("tokens") if isinstance(body, dict) else None
    if token_ids_packed(tokens) is None:
        raise ProtocolError(f"'tokens' must be a list of token IDs, got {str(tokens)[:80]}")
    if body.get("count", len(tokens)) != len(tokens):
        raise ProtocolError(f"'count' {body.get('count')!r} is not the number of tokens ({len(tokens)})")
    return tokens
