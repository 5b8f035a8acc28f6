"""Pure extraction of what the trainer needs from an engine's answer, in vLLM's shapes (the embedded engine's too).

Chat: top-level `prompt_token_ids`, `choices[i].token_ids`, `choices[i].logprobs.content[*].logprob`.
Completions: `choices[i].prompt_token_ids` (or top-level), `choices[i].token_ids`, `choices[i].logprobs.token_logprobs`.
Streams: the same fields spread over SSE chunks (prompt IDs once, each chunk's new IDs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass
class Captured:
    """Token-level facts of one response (first choice)."""

    prompt_token_ids: list[int] = field(default_factory=list)
    response_token_ids: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    text_parts: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    n_choices: int = 0
    response_id: str | None = None
    policy_version: int | None = None
    error: str | None = None

    @property
    def response_text(self) -> str:
        """The first choice's text."""
        return "".join(self.text_parts)


def _logprob(value: Any) -> float:
    return float(value) if value is not None else math.nan


def _add_choice(cap: Captured, choice: dict[str, Any]) -> None:
    """Fold one choice (or one streamed choice delta) into `cap`."""
    index = choice.get("index", 0)
    cap.n_choices = max(cap.n_choices, index + 1)
    if index != 0:
        return
    if choice.get("prompt_token_ids"):
        cap.prompt_token_ids = list(choice["prompt_token_ids"])
    if choice.get("token_ids"):
        cap.response_token_ids.extend(choice["token_ids"])
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict):
        if logprobs.get("content") is not None:
            cap.response_logprobs.extend(_logprob(item.get("logprob")) for item in logprobs["content"])
        elif logprobs.get("token_logprobs") is not None:
            cap.response_logprobs.extend(_logprob(v) for v in logprobs["token_logprobs"])
    message = choice.get("message") or choice.get("delta")
    if isinstance(message, dict):
        if message.get("content"):
            cap.text_parts.append(message["content"])
    elif choice.get("text"):
        cap.text_parts.append(choice["text"])
    if choice.get("finish_reason") is not None:
        cap.finish_reason = choice["finish_reason"]


def _add_body(cap: Captured, body: dict[str, Any]) -> None:
    """Fold one response body or one stream chunk into `cap`."""
    if body.get("error") is not None:
        error = body["error"]
        cap.error = error.get("message", str(error)) if isinstance(error, dict) else str(error)
        return
    cap.response_id = cap.response_id or body.get("id")
    if body.get("prompt_token_ids"):
        cap.prompt_token_ids = list(body["prompt_token_ids"])
    if body.get("policy_version") is not None:
        cap.policy_version = int(body["policy_version"])
    for choice in body.get("choices") or ():
        _add_choice(cap, choice)


def capture_json(body: dict[str, Any]) -> Captured:
    """Capture a non-streamed response body."""
    cap = Captured()
    _add_body(cap, body)
    return cap


def capture_sse(stream: bytes) -> Captured:
    """Capture a whole SSE stream (`data: {...}` events, `data: [DONE]` ignored)."""
    cap = Captured()
    for line in stream.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if not payload or payload == b"[DONE]":
            continue
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError:
            cap.error = f"undecodable stream chunk: {payload[:200]!r}"
            continue
        if isinstance(chunk, dict):
            _add_body(cap, chunk)
    return cap
