"""The gateway client's seams, one small protocol per role that calls it; `GatewayClient` implements every one.

The roles (README glossary, gateway/README.md "Roles"), found from the call sites; a caller declares the narrowest:

- admin (`AdminClient`): endpoints, their policy versions, pause and resume (`flows/run_processes.py`,
  `engines/vllm.py`, `trainer/collocation.py`).
- lease (`LeaseClient`): a controller's claims, leases, state changes, rewards and events (`controller/reconcile.py`,
  `controller/report.py`); its Kubernetes runner moves a working directory as artifacts (`ArtifactClient`).
- feed (`FeedClient`): the trainer's rollout feed submits rollouts and reads the finished ones back
  (`rollouts/feed.py` and the Prefect tasks that run a feed); a finished rollout's records alone
  (`RecordsClient`: `tracking/rollout_traces.py`, `flows/prefect_tasks/evaluation.py`).

The harness-facing recorder has no client here: a harness calls `/r/{id}/v1` with its own SDK.
`tests/gateway/unit/test_roles.py` checks `GatewayClient` implements each and each caller calls only its role's methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from gateway.records import (
    CallRecord,
    ClaimedRollout,
    Event,
    EventKind,
    FailureKind,
    FinishedPage,
    GatewayState,
    InfraReason,
    ModelRecord,
    PauseResult,
    Rollout,
    RolloutCreated,
    RolloutSpec,
    RolloutState,
)


class AdminClient(Protocol):
    """The admin: endpoints and their policy versions, the pause around a weight update, the gateway's state."""

    def register_model(self, name: str, base_url: str, version: int = 0,
                       served_name: str | None = None) -> ModelRecord: ...
    def set_model_version(self, name: str, version: int) -> list[ModelRecord]: ...
    def delete_model(self, name: str, base_url: str | None = None) -> int: ...
    def list_models(self) -> list[ModelRecord]: ...
    def pause(self, timeout_s: float | None = None) -> PauseResult: ...
    def resume(self) -> PauseResult: ...
    def state(self) -> GatewayState: ...


class RecordsClient(Protocol):
    """A rollout's records: its recorded calls and its events."""

    def calls(self, rollout_id: str, attempt: int | None = None) -> list[CallRecord]: ...
    def list_events(self, rollout_id: str) -> list[Event]: ...


class FeedClient(RecordsClient, Protocol):
    """The trainer's feed: submit rollouts, read the finished ones (cursor) and their records."""

    def create_rollouts(self, specs: Sequence[RolloutSpec]) -> list[RolloutCreated]: ...
    def finished(self, after: int = 0, limit: int = 100, wait_s: float = 0.0) -> FinishedPage: ...


class LeaseClient(Protocol):
    """A controller: claim rollouts (each with its attempt's key), keep and end their leases, post rewards and
    events; reads a rollout, its calls, and the gateway's pause time."""

    def claim(self, controller_id: str, limit: int = 1, lease_s: float = 60.0) -> list[ClaimedRollout]: ...
    def renew_lease(self, rollout_id: str, controller_id: str, lease_s: float = 60.0, *,
                    close_calls: bool = False) -> Rollout: ...
    def set_state(self, rollout_id: str, state: RolloutState, failure_kind: FailureKind | None = None,
                  error: str | None = None, *, attempt: int | None = None, controller_id: str | None = None,
                  reason: InfraReason | None = None) -> Rollout: ...
    def post_reward(self, rollout_id: str, reward: float, details: dict[str, Any] | None = None, *,
                    attempt: int | None = None, controller_id: str | None = None) -> Rollout: ...
    def post_event(self, rollout_id: str, kind: EventKind, payload: dict[str, Any]) -> Event: ...
    def get_rollout(self, rollout_id: str) -> Rollout: ...
    def calls(self, rollout_id: str, attempt: int | None = None) -> list[CallRecord]: ...
    def state(self) -> GatewayState: ...


class ArtifactClient(Protocol):
    """A controller's runner moving an attempt's working directory through the gateway as artifacts."""

    def put_artifact(self, rollout_id: str, name: str, data: bytes) -> Any: ...
    def get_artifact(self, rollout_id: str, name: str, attempt: int | None = None) -> bytes: ...
    def post_event(self, rollout_id: str, kind: EventKind, payload: dict[str, Any]) -> Any: ...


ROLES: dict[str, type] = {"admin": AdminClient, "records": RecordsClient, "feed": FeedClient, "lease": LeaseClient,
                          "artifacts": ArtifactClient}
"""Each role's protocol by name."""
