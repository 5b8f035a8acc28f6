"""Typed client of the gateway's admin API: `GatewayClient`, the one implementation of every role's protocol in
`gateway.client_roles` (a caller declares the role it plays: `AdminClient`, `LeaseClient`, `FeedClient`, ...)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import TypeAdapter

from gateway.artifacts import ArtifactInfo
from gateway.records import (
    MORE_CALLS_HEADER,
    CallRecord,
    ClaimedRollout,
    ClaimRequest,
    CreateRolloutsRequest,
    Event,
    EventIn,
    EventKind,
    FailureKind,
    FinishedPage,
    GatewayState,
    InfraReason,
    LeaseRenewal,
    ModelIn,
    ModelRecord,
    ModelVersionPatch,
    PauseResult,
    RewardIn,
    Rollout,
    RolloutCreated,
    RolloutPatch,
    RolloutSpec,
    RolloutState,
)


def _segment(name: str) -> str:
    """`name` as one path segment: every reserved character percent-encoded, dots too ('..' would be a dot
    segment, which HTTP clients resolve away)."""
    return quote(name, safe="").replace(".", "%2E")


CALLS_PAGE = 32
"""Calls read per request by `GatewayClient.calls` for one attempt (an attempt's calls hold at most the gateway's
max_call_bytes_per_attempt, a page a share of it)."""
CALLS_PAGE_BYTES = 8 * 2**20
"""Stored bytes a page of `GatewayClient.calls` holds at most (a call larger than this is a page of its own, within
the gateway's max_body_bytes), so each request ends within the client's timeout whatever the attempt recorded."""


class GatewayAPIError(RuntimeError):
    """The gateway answered with an error; `status` and the OpenAI-style `code` are kept."""

    def __init__(self, status: int, message: str, code: str | None) -> None:
        super().__init__(f"gateway answered {status} ({code}): {message}")
        self.status = status
        self.code = code


class GatewayClient:
    """Admin-API client; `token` is the admin (or grader) token."""

    calls_page = CALLS_PAGE  # calls read per request of one attempt's listing (`calls`)
    calls_page_bytes = CALLS_PAGE_BYTES  # and the stored bytes a page holds at most (always at least one call)

    def __init__(self, base_url: str, token: str, *, timeout_s: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s,
                                  headers={"authorization": f"Bearer {token}"})

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, *, json: Any = None, params: dict | None = None,
              timeout_s: float | None = None) -> Any:
        return self._send(method, path, json=json, params=params, timeout_s=timeout_s).json()

    def _send(self, method: str, path: str, *, json: Any = None, params: dict | None = None,
              content: bytes | None = None, timeout_s: float | None = None) -> httpx.Response:
        kwargs: dict[str, Any] = {"json": json, "params": params}
        if content is not None:
            kwargs["content"] = content
            kwargs["headers"] = {"content-type": "application/octet-stream"}
        if timeout_s is not None:
            kwargs["timeout"] = timeout_s
        response = self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            try:
                error = response.json()["error"]
                message, code = error.get("message", response.text), error.get("code")
            except (ValueError, KeyError, TypeError):
                message, code = response.text, None
            raise GatewayAPIError(response.status_code, message, code)
        return response

    # -- models --
    def register_model(self, name: str, base_url: str, version: int = 0, served_name: str | None = None) -> ModelRecord:
        """Register an upstream endpoint."""
        body = ModelIn(name=name, base_url=base_url, version=version, served_name=served_name)
        return ModelRecord.model_validate(self._call("POST", "/v1/admin/models", json=body.model_dump()))

    def set_model_version(self, name: str, version: int) -> list[ModelRecord]:
        """Set a model's policy version."""
        data = self._call("PATCH", f"/v1/admin/models/{_segment(name)}",
                          json=ModelVersionPatch(version=version).model_dump())
        return [ModelRecord.model_validate(m) for m in data]

    def delete_model(self, name: str, base_url: str | None = None) -> int:
        """Unregister a model's endpoints (only `base_url` when given); how many were removed."""
        params = {"base_url": base_url} if base_url is not None else None
        return int(self._call("DELETE", f"/v1/admin/models/{_segment(name)}", params=params)["removed"])

    def list_models(self) -> list[ModelRecord]:
        """Registered endpoints."""
        return [ModelRecord.model_validate(m) for m in self._call("GET", "/v1/admin/models")]

    # -- rollouts --
    def create_rollouts(self, specs: Sequence[RolloutSpec]) -> list[RolloutCreated]:
        """Create rollouts (idempotent by id)."""
        body = CreateRolloutsRequest(rollouts=list(specs)).model_dump(mode="json")
        return [RolloutCreated.model_validate(r) for r in self._call("POST", "/v1/admin/rollouts", json=body)]

    def get_rollout(self, rollout_id: str) -> Rollout:
        """One rollout."""
        return Rollout.model_validate(self._call("GET", f"/v1/admin/rollouts/{rollout_id}"))

    def claim(self, controller_id: str, limit: int = 1, lease_s: float = 60.0) -> list[ClaimedRollout]:
        """Lease queued rollouts, each with its base URL and the key of the attempt just claimed."""
        body = ClaimRequest(controller_id=controller_id, limit=limit, lease_s=lease_s).model_dump()
        return [ClaimedRollout.model_validate(r) for r in self._call("POST", "/v1/admin/rollouts/claim", json=body)]

    def renew_lease(self, rollout_id: str, controller_id: str, lease_s: float = 60.0, *,
                    close_calls: bool = False) -> Rollout:
        """Extend a lease (`close_calls`: the attempt's harness ended, record no more of its calls)."""
        body = LeaseRenewal(controller_id=controller_id, lease_s=lease_s, close_calls=close_calls).model_dump()
        return Rollout.model_validate(self._call("POST", f"/v1/admin/rollouts/{rollout_id}/lease", json=body))

    def set_state(self, rollout_id: str, state: RolloutState, failure_kind: FailureKind | None = None,
                  error: str | None = None, *, attempt: int | None = None, controller_id: str | None = None,
                  reason: InfraReason | None = None) -> Rollout:
        """Move a rollout along the state machine (fenced: 409 unless `attempt` is current and `controller_id` holds
        the lease, for each one given); `reason`: why an infra failure or requeue happened (`InfraReason`)."""
        body = RolloutPatch(state=state, failure_kind=failure_kind, error=error, attempt=attempt,
                            controller_id=controller_id, reason=reason).model_dump(
            mode="json", exclude={"reason"} if reason is None else None)  # an older gateway knows no reason
        return Rollout.model_validate(self._call("PATCH", f"/v1/admin/rollouts/{rollout_id}", json=body))

    def post_reward(self, rollout_id: str, reward: float, details: dict[str, Any] | None = None, *,
                    attempt: int | None = None, controller_id: str | None = None) -> Rollout:
        """Post the grader's reward (fenced like `set_state`; final once the rollout is finished)."""
        body = RewardIn(reward=reward, details=details or {}, attempt=attempt,
                        controller_id=controller_id).model_dump()
        return Rollout.model_validate(self._call("POST", f"/v1/admin/rollouts/{rollout_id}/reward", json=body))

    def post_event(self, rollout_id: str, kind: EventKind, payload: dict[str, Any]) -> Event:
        """Append an event."""
        body = EventIn(kind=kind, payload=payload).model_dump(mode="json")
        return Event.model_validate(self._call("POST", f"/v1/admin/rollouts/{rollout_id}/events", json=body))

    def list_events(self, rollout_id: str) -> list[Event]:
        """A rollout's events."""
        return [Event.model_validate(e) for e in self._call("GET", f"/v1/admin/rollouts/{rollout_id}/events")]

    def finished(self, after: int = 0, limit: int = 100, wait_s: float = 0.0) -> FinishedPage:
        """Finished rollouts after a cursor, long-polling up to `wait_s`."""
        data = self._call("GET", "/v1/admin/rollouts/finished",
                          params={"after": after, "limit": limit, "wait_s": wait_s}, timeout_s=wait_s + 30)
        return FinishedPage.model_validate(data)

    def calls(self, rollout_id: str, attempt: int | None = None) -> list[CallRecord]:
        """A rollout's recorded calls; one attempt's are read in pages of `calls_page` calls (a request each, within
        the client's timeout, however many bytes the attempt recorded)."""
        page_calls = self.calls_page
        path = f"/v1/admin/rollouts/{rollout_id}/calls"
        if attempt is None:
            return _CALLS.validate_python(self._call("GET", path))
        calls: list[CallRecord] = []
        while True:
            after = calls[-1].seq if calls else -1
            response = self._send("GET", path, params={"attempt": attempt, "after_seq": after, "limit": page_calls,
                                                       "max_bytes": self.calls_page_bytes})
            # Python's parser, as every other read: pydantic's JSON parser stops at about 200 levels, below the
            # 254 a harness's recorded request may hold (strict_json.MAX_DEPTH), and a page it cannot read would
            # fail the controller's report (the lease expires: an infra retry of the policy's making).
            page = _CALLS.validate_python(response.json())
            calls.extend(page)
            if len(page) < page_calls and response.headers.get(MORE_CALLS_HEADER) != "true":
                return calls

    # -- artifacts --
    def put_artifact(self, rollout_id: str, name: str, data: bytes) -> ArtifactInfo:
        """Store opaque bytes as `name` for the rollout's current attempt (replacing an earlier blob)."""
        response = self._send("PUT", f"/v1/admin/rollouts/{rollout_id}/artifacts/{name}", content=data)
        return ArtifactInfo.model_validate(response.json())

    def get_artifact(self, rollout_id: str, name: str, attempt: int | None = None) -> bytes:
        """An artifact's bytes (default: the current attempt); GatewayAPIError with status 404 when absent."""
        params = {"attempt": attempt} if attempt is not None else None
        return self._send("GET", f"/v1/admin/rollouts/{rollout_id}/artifacts/{name}", params=params).content

    # -- control --
    def pause(self, timeout_s: float | None = None) -> PauseResult:
        """Hold new calls and drain in-flight ones."""
        params = {"timeout_s": timeout_s} if timeout_s else None
        return PauseResult.model_validate(self._call("POST", "/v1/admin/pause", params=params,
                                                     timeout_s=(timeout_s or 900) + 30))

    def resume(self) -> PauseResult:
        """Release held calls."""
        return PauseResult.model_validate(self._call("POST", "/v1/admin/resume"))

    def state(self) -> GatewayState:
        """Pause state and endpoints."""
        return GatewayState.model_validate(self._call("GET", "/v1/admin/state"))


_CALLS = TypeAdapter(list[CallRecord])
