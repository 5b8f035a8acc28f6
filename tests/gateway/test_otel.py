"""The gateway's OpenTelemetry export (gateway/telemetry.py): off without the OTEL_* settings (the SDK not even
imported), and with them a span per call at a real OTLP/HTTP receiver, carrying the rollout's facts under their
names, the harness's traceparent as its parent."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

from gateway.client import GatewayClient
from gateway.records import SamplingRecord
from gateway.scripted import Script
from gateway.telemetry import call_attributes, enabled, span_name
from gateway.tokens import pack_ids, pack_sampling
from tests.gateway.api_support import chat, create_rollouts
from tests.gateway.otlp_receiver import OtlpReceiver
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway, InProcessScripted

PARENT_TRACE, PARENT_SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
TRACEPARENT = f"00-{PARENT_TRACE}-{PARENT_SPAN}-01"
PROMPT_TOKENS, RESPONSE_TOKENS = 16, 8  # the scripted upstream of tests/gateway/conftest.py
SPAN_KIND_CLIENT, STATUS_ERROR = 3, 2  # OTLP's enum values


@pytest.mark.parametrize(("environ", "expected"), [
    ({}, False),
    ({"OTEL_SERVICE_NAME": "gw"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, False),
])
def test_enabled_only_by_an_otlp_endpoint(environ, expected):
    assert enabled(environ) is expected


def test_off_by_default_imports_no_sdk():
    """Without OTEL_* settings a gateway process never imports the SDK or an exporter (FastAPI itself imports the
    OpenTelemetry API, which costs nothing per call)."""
    code = ("import sys; from gateway.app import create_app; from gateway.telemetry import from_environment; "
            "assert from_environment() is None; loaded = sorted(m for m in sys.modules "
            "if m.startswith(('opentelemetry.sdk', 'opentelemetry.exporter'))); "
            "assert not loaded, loaded")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


def row(**changes):
    base = {"rollout_id": "r-1", "attempt": 2, "seq": 5, "kind": "messages", "stream": True, "model": "claude-x",
            "upstream": "http://10.0.0.7:8000/v1", "status": "ok", "http_status": 200, "error": None,
            "prompt_token_ids": pack_ids(range(30)), "response_token_ids": pack_ids(range(7)),
            "finish_reason": "stop", "response_id": "msg_1", "n_choices": 1, "side": False, "policy_version": 4,
            "latency_ms": 12.5, "created_at": 1.0}
    return {**base, **changes}


def test_attributes_of_a_row():
    attributes = call_attributes(row(), recorded=True)
    assert attributes == {
        "harnessrl.rollout.id": "r-1", "harnessrl.rollout.attempt": 2, "harnessrl.call.seq": 5,
        "harnessrl.call.kind": "messages", "harnessrl.call.stream": True, "harnessrl.call.side": False,
        "harnessrl.call.status": "ok", "harnessrl.call.upstream": "http://10.0.0.7:8000/v1",
        "harnessrl.call.latency_ms": 12.5, "harnessrl.call.recorded": True, "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "claude-x", "http.response.status_code": 200, "server.address": "10.0.0.7",
        "server.port": 8000, "gen_ai.usage.input_tokens": 30, "gen_ai.usage.output_tokens": 7,
        "gen_ai.response.finish_reasons": ["stop"], "gen_ai.response.id": "msg_1", "harnessrl.policy.version": 4,
        "harnessrl.call.choices": 1}
    assert span_name(row()) == "chat claude-x"
    sampled = call_attributes(row(sampling=pack_sampling(SamplingRecord(temperature=0.7, top_k=20,
                                                                        requested={"temperature": 0.2}))),
                              recorded=True)
    assert {key: sampled[key] for key in set(sampled) - set(attributes)} == {
        "gen_ai.request.temperature": 0.7, "gen_ai.request.top_p": 1.0, "gen_ai.request.top_k": 20,
        "harnessrl.sampling.min_p": 0.0, "harnessrl.sampling.enforced": False}
    assert span_name(row(kind="completion", model="")) == "text_completion default"


def test_attributes_of_an_error_row():
    attributes = call_attributes(row(status="error", http_status=502, error="x" * 900, prompt_token_ids=None,
                                     response_token_ids=None, finish_reason=None, policy_version=None),
                                 recorded=False)
    assert attributes["error.type"] == "502" and attributes["harnessrl.call.error"] == "x" * 500
    assert attributes["harnessrl.call.recorded"] is False
    assert not {"gen_ai.usage.input_tokens", "gen_ai.response.finish_reasons", "harnessrl.policy.version"} & set(
        attributes)


@pytest.fixture(scope="module")
def receiver():
    server = OtlpReceiver().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def refusing():
    """An engine that answers every call 400."""
    upstream = InProcessScripted(Script(prompt_tokens=16, response_tokens=8, fail_first=10**9, fail_status=400))
    yield upstream.start()
    upstream.stop()


@pytest.fixture(scope="module")
def traced_gateway(tmp_path_factory, receiver, scripted, refusing):
    """A gateway started with the standard OTLP settings pointing at the receiver (read once, at start-up)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        patch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-collector-token=abc")
        patch.setenv("OTEL_SERVICE_NAME", "gw-under-test")
        patch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # ms: the batch processor's export interval
        gw = InProcessGateway(tmp_path_factory.mktemp("otel") / "store.db").start()
    with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
        admin.register_model("policy", scripted.base_url, version=3)
        admin.register_model("refusing", refusing.base_url)
    yield gw
    gw.stop()


def test_a_span_per_call_with_the_rollouts_attributes(traced_gateway, receiver):
    admin = GatewayClient(traced_gateway.url, ADMIN_TOKEN)
    (created,) = create_rollouts(admin)
    headers = {"authorization": f"Bearer {created.api_key}"}
    first = httpx.post(created.base_url + "/chat/completions", json=chat(), headers=headers, timeout=30)
    second = httpx.post(created.base_url + "/messages", timeout=30, headers={**headers, "traceparent": TRACEPARENT},
                        json={"model": "policy", "max_tokens": 8, "stream": True,
                              "messages": [{"role": "user", "content": "hi"}]})
    assert first.status_code == second.status_code == 200
    spans = receiver.wait_for(2, created.id)
    by_seq = {s.attributes["harnessrl.call.seq"]: s for s in spans}
    assert sorted(by_seq) == [0, 1]
    chat_span, messages_span = by_seq[0], by_seq[1]
    assert chat_span.name == messages_span.name == "chat policy"
    recorded = admin.calls(created.id)
    admin.close()
    for span, kind, call in ((chat_span, "chat", recorded[0]), (messages_span, "messages", recorded[1])):
        assert span.kind == SPAN_KIND_CLIENT and span.status_code != STATUS_ERROR
        assert span.attributes["harnessrl.call.kind"] == call.kind == kind
        assert span.attributes["harnessrl.rollout.attempt"] == call.attempt == 0
        assert span.attributes["gen_ai.request.model"] == "policy"
        assert span.attributes["gen_ai.usage.input_tokens"] == len(call.prompt_token_ids) == PROMPT_TOKENS
        assert span.attributes["gen_ai.usage.output_tokens"] == len(call.response_token_ids) == RESPONSE_TOKENS
        assert span.attributes["gen_ai.response.finish_reasons"] == [call.finish_reason]
        assert span.attributes["harnessrl.policy.version"] == call.policy_version
        assert span.attributes["harnessrl.call.latency_ms"] == pytest.approx(call.latency_ms)
        assert span.attributes["harnessrl.call.upstream"] == call.upstream
        assert span.attributes["http.response.status_code"] == 200
        assert span.start_ns == pytest.approx(call.created_at * 1e9, abs=1e3) and span.end_ns > span.start_ns
        assert span.resource["service.name"] == "gw-under-test"
        assert span.headers["x-collector-token"] == "abc"
    assert messages_span.attributes["harnessrl.call.stream"] is True
    assert (messages_span.trace_id, messages_span.parent_span_id) == (PARENT_TRACE, PARENT_SPAN)
    assert chat_span.parent_span_id == "" and chat_span.trace_id != PARENT_TRACE  # no traceparent: a root span


def test_a_refused_call_is_an_error_span(traced_gateway, receiver):
    with GatewayClient(traced_gateway.url, ADMIN_TOKEN) as admin:
        (created,) = create_rollouts(admin)
    answer = httpx.post(created.base_url + "/messages", timeout=30,
                        headers={"authorization": f"Bearer {created.api_key}"},
                        json={"model": "refusing", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
    assert answer.status_code == 400
    (span,) = receiver.wait_for(1, created.id)
    assert span.status_code == STATUS_ERROR and span.attributes["harnessrl.call.status"] == "error"
    assert span.attributes["http.response.status_code"] == 400 and span.attributes["error.type"] == "400"
    assert "scripted failure" in span.attributes["harnessrl.call.error"]
