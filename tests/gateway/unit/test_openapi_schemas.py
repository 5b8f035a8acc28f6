"""The harness routes' request schemas name what their parsers know, and the served document uses them."""

from __future__ import annotations

from gateway.app import create_app
from gateway.config import GatewayConfig
from gateway.openapi_schemas import harness_schemas
from gateway.protocols import anthropic_request, responses_request
from gateway.records import EventKind

SCHEMAS = harness_schemas()


def test_the_refusing_protocols_name_every_field_their_parser_knows_and_no_other() -> None:
    known = responses_request.HANDLED | responses_request.IGNORED | responses_request.TRANSLATED
    assert set(SCHEMAS["ResponsesRequest"]["properties"]) == known
    for name in ("MessagesRequest", "CountTokensRequest"):
        assert set(SCHEMAS[name]["properties"]) == anthropic_request.KNOWN_FIELDS
    assert {SCHEMAS[name]["additionalProperties"] for name in ("ResponsesRequest", "MessagesRequest",
                                                                "HarnessEvent")} == {False}


def test_required_fields_are_what_the_parsers_require() -> None:
    required = {name: SCHEMAS[name].get("required") for name in SCHEMAS}
    assert required == {"HarnessEvent": ["kind"], "ChatCompletionRequest": ["messages"],
                        "CompletionRequest": ["prompt"], "MessagesRequest": ["model", "messages", "max_tokens"],
                        "CountTokensRequest": ["model", "messages"], "ResponsesRequest": ["input"]}
    assert SCHEMAS["HarnessEvent"]["properties"]["kind"]["enum"] == [EventKind.AGENT_OUTPUT, EventKind.LOG]


def test_every_harness_json_body_is_one_of_the_schemas() -> None:
    document = create_app(GatewayConfig(admin_token="doc-only")).admin.openapi()
    refs = {path: item["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            for path, item in document["paths"].items() if path.startswith("/r/") and "post" in item}
    assert refs == {"/r/{rollout_id}/v1/chat/completions": "#/components/schemas/ChatCompletionRequest",
                    "/r/{rollout_id}/v1/completions": "#/components/schemas/CompletionRequest",
                    "/r/{rollout_id}/v1/responses": "#/components/schemas/ResponsesRequest",
                    "/r/{rollout_id}/v1/messages": "#/components/schemas/MessagesRequest",
                    "/r/{rollout_id}/v1/messages/count_tokens": "#/components/schemas/CountTokensRequest",
                    "/r/{rollout_id}/events": "#/components/schemas/HarnessEvent"}
    assert set(SCHEMAS) <= set(document["components"]["schemas"])
