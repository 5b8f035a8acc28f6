"""Helpers shared by the gateway API tests: rollout creation, raw HTTP calls, the error-shape check, configs."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import yaml

from gateway.client import GatewayClient
from gateway.records import ClaimedRollout, RolloutCreated, RolloutSpec

CHAT_PATH, COMPLETIONS_PATH, MODELS_PATH = "/v1/chat/completions", "/v1/completions", "/v1/models"


def new_id(prefix: str = "r") -> str:
    """A rollout id no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def create_rollouts(admin: GatewayClient, count: int = 1, *, prefix: str = "r", **spec: Any) -> list[RolloutCreated]:
    """Create `count` fresh rollouts (one group unless `group_id` is given)."""
    group_id = spec.pop("group_id", new_id("g"))
    specs = [RolloutSpec(id=new_id(prefix), group_id=group_id, **spec) for _ in range(count)]
    return admin.create_rollouts(specs)


def claimed_rollout(admin: GatewayClient, prefix: str) -> ClaimedRollout:
    """A fresh rollout, claimed by controller "ctl" (its first attempt running, its harness key minted)."""
    rollout_id = new_id(prefix)
    admin.create_rollouts([RolloutSpec(id=rollout_id, group_id=new_id("g"))])
    (claimed,) = [r for r in admin.claim("ctl", limit=1000, lease_s=600) if r.id == rollout_id]
    return claimed


def current_key(admin: GatewayClient, rollout_id: str) -> RolloutCreated:
    """The rollout's base URL and key for its current attempt, by idempotent re-creation (a key is bound to the
    attempt it was minted for; the claim that started the attempt answers the same, `ClaimedRollout`)."""
    r = admin.get_rollout(rollout_id)
    (created,) = admin.create_rollouts([RolloutSpec(id=r.id, group_id=r.group_id, input=r.input, mode=r.mode,
                                                    max_attempts=r.max_attempts, sampling_seed=r.sampling_seed)])
    return created


def chat(model: str = "policy", **extra: Any) -> dict[str, Any]:
    """A minimal chat request body."""
    return {"model": model, "messages": [{"role": "user", "content": "hello"}], **extra}


def completion(model: str = "policy", **extra: Any) -> dict[str, Any]:
    """A minimal completions request body."""
    return {"model": model, "prompt": "hello", **extra}


def auth(token: str | None) -> dict[str, str]:
    """Authorization header for a bearer token (none when `token` is None)."""
    return {} if token is None else {"authorization": f"Bearer {token}".strip()}


def request(gateway_url: str, method: str, path: str, token: str | None, body: Any = None,
            headers: dict[str, str] | None = None, **kwargs: Any) -> httpx.Response:
    """One raw HTTP request to the gateway."""
    return httpx.request(method, gateway_url + path, json=body, headers={**auth(token), **(headers or {})},
                         timeout=30, **kwargs)


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    """The OpenAI-style error object of `response`, after checking its status and exact shape."""
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(error["type"], str) and error["type"], error
    return error


def write_config(path: Path, **settings: Any) -> Path:
    """A YAML gateway config file."""
    path.write_text(yaml.safe_dump(settings))
    return path
