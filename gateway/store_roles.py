"""The store's seams, one small protocol per role that uses it; `Store` is all of them (`SqlStore` implements it).

The roles (README glossary, gateway/README.md "Roles"), found from the call sites:

- recorder: the harness-facing routes (`routes/harness.py`, `proxy.py`): a rollout's brief, call numbers and rows,
  the harness's own events. `HistoryStore`: the earlier calls a call continues (`continuation.py`,
  `recorded_turns.py`).
- admin: endpoints and their policy versions, the key-minting secret (`routes/models.py`, `routes/control.py`,
  `context.py`).
- lease: what a controller does to the rollouts it holds: claim (with each claimed attempt's key), renew, move
  along the state machine, reward, its events (`routes/rollouts.py`).
- artifact: artifacts stored, read and sized, a harness's own and a controller's (`routes/harness.py`,
  `routes/artifacts.py`).
- feed: what the trainer's rollout feed submits and reads back: creation (with the keys), the finished cursor, a
  rollout, its calls and events (`routes/rollouts.py`, `routes/calls.py`).

A gateway module reaches the store through the context's view of its role (`GatewayContext.recorder_store`, ...);
`tests/gateway/unit/test_roles.py` checks each module calls only its role's methods.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.artifacts import ArtifactInfo
from gateway.records import (
    CallRecord,
    Event,
    EventKind,
    FinishedPage,
    ModelIn,
    ModelRecord,
    RewardIn,
    Rollout,
    RolloutMode,
    RolloutPatch,
    RolloutSpec,
    RolloutState,
)


@dataclass(frozen=True)
class RolloutBrief:
    """What the proxy hot path needs to know about a rollout."""

    state: RolloutState
    attempt: int
    mode: RolloutMode
    sampling_seed: int | None = None
    """Seeds every call of the rollout (`RolloutSpec.sampling_seed`)."""
    calls_closed: bool = False
    """The controller closed the current attempt's calls (its harness ended): none is recorded any more."""


@dataclass(frozen=True)
class StoredContinuation:
    """An answer's stored continuation (`gateway.continuation`): its size, and its JSON unless it was too long to
    read."""

    size_bytes: int  # its stored length
    data: bytes | None  # the JSON of its turns; None when longer than the reader's max_bytes


class RecorderStore(Protocol):
    """The harness-facing recorder: one call's number and row, the harness's events and artifacts."""

    @property
    def shared(self) -> bool:
        """Whether other gateways share the store (a cached brief may be stale)."""
    async def brief(self, rollout_id: str, *, fresh: bool = False) -> RolloutBrief: ...
    async def next_call_seq(self, rollout_id: str, attempt: int) -> int: ...
    async def charge_call_bytes(self, rollout_id: str, attempt: int, size: int, budget_bytes: int,
                                what: str) -> None: ...
    async def insert_call(self, row: dict[str, Any]) -> None: ...
    async def add_event(self, rollout_id: str, kind: EventKind, payload: dict[str, Any], *,
                        attempt: int | None = None, quota_bytes: int | None = None) -> Event: ...


class HistoryStore(Protocol):
    """The recorder's reads of an attempt's earlier calls: the conversation a call continues."""

    async def continuation(self, rollout_id: str, attempt: int, response_id: str, kind: str,
                           max_bytes: int | None = None) -> StoredContinuation | None: ...
    async def recent_calls(self, rollout_id: str, attempt: int, kind: str, limit: int, *,
                           max_request_bytes: int | None = None,
                           admit: Callable[[int], None] | None = None) -> list[CallRecord]: ...
    async def list_calls(self, rollout_id: str, attempt: int | None, *, after_seq: int | None = None,
                         limit: int | None = None, max_bytes: int | None = None) -> list[CallRecord]: ...


class AdminStore(Protocol):
    """The admin: endpoints, their policy versions, the secret keys are minted from."""

    async def register_model(self, model: ModelIn) -> ModelRecord: ...
    async def set_model_version(self, name: str, version: int) -> list[ModelRecord]: ...
    async def delete_model(self, name: str, base_url: str | None) -> int: ...
    async def list_models(self) -> list[ModelRecord]: ...
    async def secret(self) -> bytes: ...


class LeaseStore(Protocol):
    """A controller's leases: claim, renew, state changes, rewards, its events and artifacts."""

    async def claim(self, controller_id: str, limit: int, lease_s: float) -> list[Rollout]: ...
    async def renew_lease(self, rollout_id: str, controller_id: str, lease_s: float, *,
                          close_calls: bool = False) -> Rollout: ...
    async def transition(self, rollout_id: str, patch: RolloutPatch) -> Rollout: ...
    async def set_reward(self, rollout_id: str, reward: RewardIn) -> Rollout: ...
    async def add_event(self, rollout_id: str, kind: EventKind, payload: dict[str, Any], *,
                        attempt: int | None = None, quota_bytes: int | None = None) -> Event: ...
    async def secret(self) -> bytes: ...


class ArtifactStore(Protocol):
    """Artifacts: a harness's own (the harness-facing routes) and any rollout's (a controller's)."""

    async def put_artifact(self, rollout_id: str, name: str, data: bytes, *, refuse_finished: bool,
                           attempt: int | None = None, quota_bytes: int | None = None) -> ArtifactInfo: ...
    async def get_artifact(self, rollout_id: str, name: str, attempt: int | None) -> bytes: ...
    async def artifact_size(self, rollout_id: str, name: str, attempt: int | None) -> int: ...


class FeedStore(Protocol):
    """The trainer's feed: rollouts submitted, the finished cursor, a rollout's calls, events and artifacts."""

    async def create_rollouts(self, specs: Sequence[RolloutSpec]) -> list[tuple[Rollout, bool]]: ...
    async def list_finished(self, after: int, limit: int, wait_s: float) -> FinishedPage: ...
    def stop_waiting(self) -> None: ...  # the server is stopping: long-polls answer now, and later ones at once
    async def get_rollout(self, rollout_id: str) -> Rollout: ...
    async def list_calls(self, rollout_id: str, attempt: int | None, *, after_seq: int | None = None,
                         limit: int | None = None, max_bytes: int | None = None) -> list[CallRecord]: ...
    async def call_follows(self, rollout_id: str, attempt: int, seq: int) -> bool: ...
    async def list_events(self, rollout_id: str) -> list[Event]: ...
    async def secret(self) -> bytes: ...


class Store(RecorderStore, HistoryStore, AdminStore, LeaseStore, ArtifactStore, FeedStore, Protocol):
    """Everything the gateway persists: every role's protocol, and closing."""

    def close(self) -> None: ...


ROLES: dict[str, type] = {"recorder": RecorderStore, "history": HistoryStore, "admin": AdminStore,
                          "lease": LeaseStore, "artifact": ArtifactStore, "feed": FeedStore}
"""Each role's protocol by the name of the context's view of it (`GatewayContext.<role>_store`)."""
