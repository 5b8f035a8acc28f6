"""OpenAPI descriptions of the harness-facing paths, which are served as raw ASGI outside FastAPI's router; their
request bodies are the components of `openapi_schemas.harness_schemas`."""

from __future__ import annotations

_ERR = {"description": "OpenAI-style error: {\"error\": {message, type, param, code}}"}
_ERRORS = {"400": _ERR, "401": _ERR, "403": _ERR, "404": _ERR, "409": _ERR, "413": _ERR, "429": _ERR,
           "502": _ERR, "503": _ERR}
_ROLLOUT = {"name": "rollout_id", "in": "path", "required": True, "schema": {"type": "string"}}
_SECURITY = [{"rolloutKey": []}]
_NAME = {"name": "name", "in": "path", "required": True,
         "schema": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,100}$"}}
_OCTETS = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
_ANTHROPIC_ERR = {"description": "Anthropic-style error: {\"type\": \"error\", \"error\": {type, message}} (the "
                                 "gateway's code in brackets at the end of message)"}
_ANTHROPIC_ERRORS = {status: _ANTHROPIC_ERR for status in _ERRORS}


def _body(component: str) -> dict:
    """A required JSON request body described by one of `harness_schemas()`."""
    return {"required": True, "content": {"application/json": {"schema": {
        "$ref": f"#/components/schemas/{component}"}}}}


def _anthropic(summary: str, answer: str, component: str) -> dict:
    return {"post": {
        "tags": ["harness"], "summary": summary, "parameters": [_ROLLOUT], "security": _SECURITY,
        "description": "The rollout key as `x-api-key: <key>` (Anthropic's header) or `Authorization: Bearer <key>`; "
                       "any `anthropic-version` and `anthropic-beta` headers are accepted.",
        "requestBody": _body(component),
        "responses": {"200": {"description": answer}, **_ANTHROPIC_ERRORS},
    }}


_BYTE_FOR_BYTE = "The engine's answer, byte for byte (JSON, or SSE when stream=true); header X-Policy-Version."


def _proxy(summary: str, component: str, answer: str = _BYTE_FOR_BYTE) -> dict:
    return {"post": {
        "tags": ["harness"], "summary": summary, "parameters": [_ROLLOUT], "security": _SECURITY,
        "requestBody": _body(component),
        "responses": {"200": {"description": answer}, **_ERRORS},
    }}


def harness_paths() -> dict:
    """Path items for /r/{rollout_id}/..."""
    return {
        "/r/{rollout_id}/v1/chat/completions": _proxy("OpenAI chat completions, recorded with token IDs",
                                                      "ChatCompletionRequest"),
        "/r/{rollout_id}/v1/completions": _proxy("OpenAI completions, recorded with token IDs", "CompletionRequest"),
        "/r/{rollout_id}/v1/responses": _proxy("OpenAI Responses, translated to the engine's chat completions and "
                                               "recorded with its token IDs (previous_response_id served from this "
                                               "rollout's recorded calls)", "ResponsesRequest",
                                               "A response object (JSON, or the Responses SSE events when "
                                               "stream=true); header X-Policy-Version."),
        "/r/{rollout_id}/v1/messages": _anthropic(
            "Anthropic Messages, translated to the engine's chat completions and recorded with its token IDs",
            "An Anthropic message (JSON, or Anthropic's SSE events when stream=true); header X-Policy-Version.",
            "MessagesRequest"),
        "/r/{rollout_id}/v1/messages/count_tokens": _anthropic(
            "Anthropic token count: the prompt the engine would see, counted by its tokenizer (recorded as a side "
            "call)", "{\"input_tokens\": N}", "CountTokensRequest"),
        "/r/{rollout_id}/v1/models": {"get": {
            "tags": ["harness"], "summary": "Models served", "parameters": [_ROLLOUT], "security": _SECURITY,
            "responses": {"200": {"description": "OpenAI model list"}, **_ERRORS}}},
        "/r/{rollout_id}/events": {"post": {
            "tags": ["harness"], "summary": "Post an agent_output or log event for this rollout",
            "parameters": [_ROLLOUT], "security": _SECURITY,
            "requestBody": _body("HarnessEvent"),
            "responses": {"200": {"description": "The stored event"}, **_ERRORS}}},
        "/r/{rollout_id}/artifacts/{name}": _artifact(),
    }


def _artifact() -> dict:
    common = {"tags": ["harness"], "parameters": [_ROLLOUT, _NAME], "security": _SECURITY}
    return {
        "get": {**common, "summary": "Download an artifact of this rollout's current attempt (404 when absent)",
                "responses": {"200": {"description": "The artifact's bytes", "content": _OCTETS}, **_ERRORS}},
        "put": {**common, "summary": "Store an artifact (opaque bytes, at most max_body_bytes) for this rollout's "
                                     "current attempt; 409 once the rollout is finished",
                "requestBody": {"required": True, "content": _OCTETS},
                "responses": {"200": {"description": "ArtifactInfo: rollout_id, attempt, name, size_bytes, "
                                                     "created_at"}, **_ERRORS}},
    }
