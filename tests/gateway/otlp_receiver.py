"""A minimal OTLP/HTTP trace receiver for tests: `POST /v1/traces` (protobuf), spans decoded with opentelemetry-proto
and kept with the request headers they came with."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

TRACES_PATH = "/v1/traces"


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span: ids as hex, attributes and resource attributes as Python values."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    status_code: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    headers: dict[str, str]


def any_value(value: AnyValue) -> Any:
    """An OTLP AnyValue as a Python value (arrays as lists)."""
    which = value.WhichOneof("value")
    if which == "array_value":
        return [any_value(v) for v in value.array_value.values]
    return None if which is None else getattr(value, which)


def decode(body: bytes, headers: dict[str, str]) -> list[ReceivedSpan]:
    """The spans of one OTLP/HTTP protobuf export request."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = {a.key: any_value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for s in scope_spans.spans:
                spans.append(ReceivedSpan(
                    name=s.name, trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                    parent_span_id=s.parent_span_id.hex(), kind=s.kind, status_code=s.status.code,
                    start_ns=s.start_time_unix_nano, end_ns=s.end_time_unix_nano,
                    attributes={a.key: any_value(a.value) for a in s.attributes}, resource=resource,
                    headers=headers))
    return spans


@dataclass
class OtlpReceiver:
    """An OTLP/HTTP receiver on a loopback port, served on a daemon thread; `spans` grows as exports arrive."""

    spans: list[ReceivedSpan] = field(default_factory=list)

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.path != TRACES_PATH or self.headers.get("content-type") != "application/x-protobuf":
                    self.send_error(404 if self.path != TRACES_PATH else 415)
                    return
                received = decode(body, {k.lower(): v for k, v in self.headers.items()})
                with receiver._lock:
                    receiver.spans.extend(received)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                return

        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="otlp-receiver", daemon=True)

    @property
    def endpoint(self) -> str:
        """The base URL (what `OTEL_EXPORTER_OTLP_ENDPOINT` takes; the exporter appends /v1/traces)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def wait_for(self, count: int, rollout_id: str, timeout_s: float = 10.0) -> list[ReceivedSpan]:
        """The spans of `rollout_id` once at least `count` have arrived; AssertionError after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                spans = [s for s in self.spans if s.attributes.get("harnessrl.rollout.id") == rollout_id]
            if len(spans) >= count or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert len(spans) >= count, f"expected {count} spans of {rollout_id} within {timeout_s} s, got {spans}"
        return spans
