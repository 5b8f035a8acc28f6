"""OpenTelemetry export of the gateway's calls: one span per harness call, off unless the standard OTLP settings ask.

`from_environment()` reads the standard variables: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is) or
`OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` appended), their `_HEADERS` (e.g. MLflow's `x-mlflow-experiment-id=1`),
`OTEL_SERVICE_NAME` (default `harnessrl-gateway`) and `OTEL_RESOURCE_ATTRIBUTES`. With neither endpoint set (or
`OTEL_SDK_DISABLED=true`, or `OTEL_TRACES_EXPORTER=none`) it returns None and the OpenTelemetry SDK is never imported:
the proxy path pays one `is None` check per call.

A span is made when the call's row is recorded (`call_span`): it starts at the call's arrival, ends at the recording,
carries the row's facts (rollout, attempt, seq, kind, model, upstream, status, HTTP status, token counts, finish
reason, policy version, latency) under GenAI semantic-convention names where they fit, and is the child of the
`traceparent` (W3C trace context) the harness sent, if any. Spans go through a batch span processor: the proxy path
only appends to its queue, a background thread exports.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Protocol
from urllib.parse import urlsplit

import orjson

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
DEFAULT_SERVICE_NAME = "harnessrl-gateway"
INT32_BYTES = 4  # token IDs are stored as packed int32 (gateway.tokens.pack_ids)
ERROR_CHARS = 500  # the error text a span carries, at most
OPERATIONS = {"chat": "chat", "messages": "chat", "responses": "chat", "completion": "text_completion",
              "count_tokens": "count_tokens"}
"""A call kind's `gen_ai.operation.name` (translated protocols are chat to the engine)."""


class CallTelemetry(Protocol):
    """Where the gateway reports each recorded call."""

    def call_span(self, row: Mapping[str, Any], traceparent: str | None, *, recorded: bool) -> None:
        """Report one call from its store row (`gateway.proxy.call_row`)."""

    def close(self) -> None:
        """Flush what is queued and stop exporting."""


def enabled(environ: Mapping[str, str]) -> bool:
    """Whether the standard OpenTelemetry settings in `environ` ask for trace export."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def from_environment(environ: Mapping[str, str] | None = None) -> CallTelemetry | None:
    """An OTLP/HTTP exporter of call spans configured by the standard variables, or None when they ask for none."""
    environ = os.environ if environ is None else environ
    if not enabled(environ):
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OtlpCallTelemetry(OTLPSpanExporter(), service_name=environ.get("OTEL_SERVICE_NAME") or None)


def call_attributes(row: Mapping[str, Any], *, recorded: bool) -> dict[str, Any]:
    """The span attributes of one call's store row (pure): harnessrl.* for the rollout's facts, GenAI and HTTP
    semantic-convention names for the model call's."""
    attributes: dict[str, Any] = {
        "harnessrl.rollout.id": row["rollout_id"], "harnessrl.rollout.attempt": row["attempt"],
        "harnessrl.call.seq": row["seq"], "harnessrl.call.kind": row["kind"], "harnessrl.call.stream": row["stream"],
        "harnessrl.call.side": bool(row.get("side")), "harnessrl.call.status": row["status"],
        "harnessrl.call.upstream": row["upstream"], "harnessrl.call.latency_ms": float(row["latency_ms"]),
        "harnessrl.call.recorded": recorded,
        "gen_ai.operation.name": OPERATIONS.get(row["kind"], row["kind"]), "gen_ai.request.model": row["model"],
        "http.response.status_code": row["http_status"],
    }
    attributes.update(_server(row["upstream"]))
    optional = {
        "gen_ai.usage.input_tokens": _token_count(row.get("prompt_token_ids")),
        "gen_ai.usage.output_tokens": _token_count(row.get("response_token_ids")),
        "gen_ai.response.finish_reasons": [row["finish_reason"]] if row.get("finish_reason") else None,
        "gen_ai.response.id": row.get("response_id"), "harnessrl.policy.version": row.get("policy_version"),
        "harnessrl.call.choices": row.get("n_choices"),
        "error.type": str(row["http_status"]) if row["status"] != "ok" else None,
        "harnessrl.call.error": (row.get("error") or "")[:ERROR_CHARS] or None,
    }
    attributes.update({key: value for key, value in optional.items() if value is not None})
    attributes.update(_sampling(row.get("sampling")))
    return attributes


def _sampling(packed: bytes | None) -> dict[str, Any]:
    """GenAI request attributes of the sampling the engine applied (`gateway.tokens.pack_sampling`; none: a call
    that sampled nothing), and whether the gateway enforced the policy's."""
    if packed is None:
        return {}
    sampling = orjson.loads(packed)
    return {"gen_ai.request.temperature": sampling["temperature"], "gen_ai.request.top_p": sampling["top_p"],
            "gen_ai.request.top_k": sampling["top_k"], "harnessrl.sampling.min_p": sampling["min_p"],
            "harnessrl.sampling.enforced": sampling["enforced"]}


def span_name(row: Mapping[str, Any]) -> str:
    """`{operation} {model}`, as the GenAI conventions name a model call's span."""
    return f"{OPERATIONS.get(row['kind'], row['kind'])} {row['model'] or 'default'}".strip()


@lru_cache(maxsize=256)
def _server(upstream: str) -> dict[str, Any]:
    """`server.address` and `server.port` of an upstream base URL (a handful per gateway: cached)."""
    parts = urlsplit(upstream)
    return {key: value for key, value in (("server.address", parts.hostname), ("server.port", parts.port)) if value}


def _token_count(packed: bytes | None) -> int | None:
    return None if packed is None else len(packed) // INT32_BYTES


class OtlpCallTelemetry:
    """Call spans through a batch span processor into `exporter` (a SpanExporter), on a tracer provider of its own
    (the process's global provider, e.g. MLflow's tracing in the same process, is left alone)."""

    def __init__(self, exporter, *, service_name: str | None = None) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace import SpanKind, Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        resource = Resource.create({} if os.environ.get("OTEL_SERVICE_NAME") else
                                   {"service.name": service_name or DEFAULT_SERVICE_NAME})
        self._provider = TracerProvider(resource=resource)
        self._provider.add_span_processor(BatchSpanProcessor(exporter))
        self._tracer = self._provider.get_tracer("harnessrl.gateway")
        self._propagator = TraceContextTextMapPropagator()
        self._kind, self._status, self._error = SpanKind.CLIENT, Status, StatusCode.ERROR

    def call_span(self, row: Mapping[str, Any], traceparent: str | None, *, recorded: bool) -> None:
        """A finished span for the call, from its arrival (`created_at`) to now, child of `traceparent` if sent."""
        parent = self._propagator.extract({"traceparent": traceparent}) if traceparent else None
        span = self._tracer.start_span(span_name(row), context=parent, kind=self._kind,
                                       start_time=int(row["created_at"] * 1e9),
                                       attributes=call_attributes(row, recorded=recorded))
        if row["status"] != "ok" or not recorded:
            why = (row.get("error") or "")[:ERROR_CHARS] if recorded else "the call could not be recorded"
            span.set_status(self._status(self._error, why or f"HTTP {row['http_status']}"))
        span.end(end_time=time.time_ns())

    def close(self) -> None:
        """Export what is queued (bounded by the processor's export timeout), then stop."""
        self._provider.shutdown()
