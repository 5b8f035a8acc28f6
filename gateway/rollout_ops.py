"""Rollout write operations, each run on the writer connection inside one transaction.

They enforce the state machine of `records.TRANSITIONS`, the lease rules, idempotent creation, and the fences of
reward and state writes: a write naming an attempt that is not the current one, or a lease its writer does not hold,
is refused (409) and changes nothing; a finished rollout's reward is final; a requeue drops the ended attempt's reward.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import sqlalchemy as sa

from gateway import schema
from gateway.errors import BadRequest, Conflict, InvalidTransition, NotFound
from gateway.nul_text import from_column, to_column
from gateway.records import (
    TERMINAL_STATES,
    TRANSITIONS,
    EventKind,
    FailureKind,
    InfraReason,
    RewardIn,
    Rollout,
    RolloutPatch,
    RolloutSpec,
    RolloutState,
    can_transition,
)

R = schema.rollouts.c
FINISHED_SEQ_LOCK = 0x6872_6C5F_6669_6E  # "hrl_fin": PostgreSQL advisory lock key serializing finished_seq numbers


def row_to_rollout(row: Any) -> Rollout:
    """A stored rollout row as a `Rollout`."""
    return Rollout(
        id=row.id, group_id=row.group_id, input=orjson.loads(row.input), mode=row.mode, state=row.state,
        attempt=row.attempt, max_attempts=row.max_attempts, failure_kind=row.failure_kind,
        error=from_column(row.error), reward=row.reward, lease_owner=row.lease_owner,
        lease_expires_at=row.lease_expires_at, created_at=row.created_at, started_at=row.started_at,
        finished_at=row.finished_at,
        finished_seq=row.finished_seq, sampling_seed=row.sampling_seed, calls_closed_at=row.calls_closed_at,
    )


def _load(conn: sa.Connection, rollout_id: str, *, for_update: bool = False) -> Any:
    """The rollout's row; `for_update` locks it `FOR UPDATE` on PostgreSQL (a change that ends its attempt or closes
    its calls: it waits for the calls being committed, whose fence holds the row `FOR KEY SHARE`, `call_fence`)."""
    query = sa.select(schema.rollouts).where(R.id == rollout_id)
    row = conn.execute(query.with_for_update() if for_update else query).first()
    if row is None:
        raise NotFound(f"rollout {rollout_id!r} does not exist", param="rollout_id")
    return row


def _event(conn: sa.Connection, rollout_id: str, attempt: int, kind: EventKind, payload: dict, now: float) -> None:
    conn.execute(schema.events.insert().values(rollout_id=rollout_id, attempt=attempt, kind=kind.value,
                                               payload=orjson.dumps(payload), created_at=now))


def create_rollouts(conn: sa.Connection, specs: Sequence[RolloutSpec], now: float) -> list[tuple[Rollout, bool]]:
    """Insert new rollouts; an existing id must carry the same spec (else 409). All-or-nothing."""
    existing = {row.id: row for row in conn.execute(
        sa.select(schema.rollouts).where(R.id.in_([s.id for s in specs]))).all()}
    out: list[tuple[Rollout, bool]] = []
    new_rows = []
    for spec in specs:
        row = existing.get(spec.id)
        if row is not None:
            _check_same_spec(row, spec)
            out.append((row_to_rollout(row), False))
            continue
        values = {"id": spec.id, "group_id": spec.group_id, "input": orjson.dumps(spec.input),
                  "mode": spec.mode.value, "state": RolloutState.QUEUED.value, "attempt": 0,
                  "max_attempts": spec.max_attempts, "created_at": now, "sampling_seed": spec.sampling_seed}
        new_rows.append(values)
        out.append((Rollout(**{**values, "input": spec.input}), True))
    if new_rows:
        conn.execute(schema.rollouts.insert(), new_rows)
    return out


def _check_same_spec(row: Any, spec: RolloutSpec) -> None:
    same = (row.group_id == spec.group_id and orjson.loads(row.input) == spec.input
            and row.mode == spec.mode.value and row.max_attempts == spec.max_attempts
            and row.sampling_seed == spec.sampling_seed)
    if not same:
        raise Conflict(f"rollout {spec.id!r} already exists with a different spec; use a new id", param="id")


def claim_rollouts(conn: sa.Connection, controller_id: str, limit: int, lease_s: float,
                   now: float) -> tuple[list[Rollout], list[str]]:
    """Expire lost leases (requeue, or fail as infra when attempts are spent), then lease queued rollouts FIFO."""
    expired = conn.execute(sa.select(schema.rollouts).where(  # locked: another gateway on the store may be here
        R.state == RolloutState.RUNNING.value, R.lease_expires_at < now).with_for_update(skip_locked=True)).all()
    for row in expired:
        reason = f"lease of {row.lease_owner!r} expired during attempt {row.attempt}"
        _requeue_or_fail(conn, row, reason, now)
    rows = conn.execute(sa.select(schema.rollouts).where(R.state == RolloutState.QUEUED.value)
                        .order_by(R.created_at, R.id).limit(limit).with_for_update(skip_locked=True)).all()
    claimed = []
    for row in rows:
        values = {"state": RolloutState.RUNNING.value, "attempt": row.attempt + 1, "lease_owner": controller_id,
                  "lease_expires_at": now + lease_s, "started_at": now, "next_seq": 0,  # the new attempt's calls: 0..
                  "calls_closed_at": None}  # ... recorded until the controller closes them (`renew_lease`)
        conn.execute(schema.rollouts.update().where(R.id == row.id).values(**values))
        _event(conn, row.id, row.attempt + 1, EventKind.STATE, {"state": "running", "by": controller_id}, now)
        claimed.append(row_to_rollout(_load(conn, row.id)))
    return claimed, [row.id for row in expired]


def _requeue_or_fail(conn: sa.Connection, row: Any, error: str, now: float) -> None:
    """An expired lease: the attempt is an infra failure (`lease_expired`), requeued while attempts remain."""
    conn.execute(schema.rollouts.update().where(R.id == row.id).values(reward=None))  # the attempt did not finish
    reason = InfraReason.LEASE_EXPIRED.value
    if row.attempt < row.max_attempts:
        conn.execute(schema.rollouts.update().where(R.id == row.id).values(
            state=RolloutState.QUEUED.value, lease_owner=None, lease_expires_at=None, error=error))
        _event(conn, row.id, row.attempt, EventKind.STATE, {"state": "queued", "error": error, "reason": reason}, now)
        return
    message = f"{error}; {row.max_attempts} attempts spent"
    _finish(conn, row.id, RolloutState.FAILED, FailureKind.INFRA, message, now)
    _event(conn, row.id, row.attempt, EventKind.STATE,
           {"state": "failed", "failure_kind": FailureKind.INFRA.value, "error": message, "reason": reason}, now)


def _finish(conn: sa.Connection, rollout_id: str, state: RolloutState, kind: FailureKind | None,
            error: str | None, now: float) -> None:
    if conn.dialect.name == "postgresql":  # gateways sharing the store take finished_seq numbers one at a time
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(FINISHED_SEQ_LOCK)))
    last = conn.execute(sa.select(sa.func.max(R.finished_seq))).scalar() or 0
    conn.execute(schema.rollouts.update().where(R.id == rollout_id).values(
        state=state.value, failure_kind=kind.value if kind else None, error=to_column(error), finished_at=now,
        finished_seq=last + 1, lease_owner=None, lease_expires_at=None))


def renew_lease(conn: sa.Connection, rollout_id: str, controller_id: str, lease_s: float, now: float, *,
                close_calls: bool = False) -> Rollout:
    """Extend a running rollout's lease; only its owner may. With `close_calls` the attempt's calls are closed (its
    harness ended): the store records no more calls of it (`gateway.call_fence`)."""
    row = _load(conn, rollout_id, for_update=close_calls)
    if row.state != RolloutState.RUNNING.value:
        raise Conflict(f"rollout {rollout_id!r} is {row.state}, not running; its lease cannot be renewed")
    if row.lease_owner != controller_id:
        raise Conflict(f"rollout {rollout_id!r} is leased by {row.lease_owner!r}, not {controller_id!r}")
    values: dict[str, Any] = {"lease_expires_at": now + lease_s}
    if close_calls and row.calls_closed_at is None:
        values["calls_closed_at"] = now
    conn.execute(schema.rollouts.update().where(R.id == rollout_id).values(**values))
    return row_to_rollout(_load(conn, rollout_id))


def check_fence(row: Any, attempt: int | None, controller_id: str | None) -> None:
    """Conflict unless the write's attempt (when named) is the rollout's current one and its writer (when named)
    holds the lease of a running rollout."""
    if attempt is not None and attempt != row.attempt:
        raise Conflict(f"rollout {row.id!r} is at attempt {row.attempt}, not {attempt}; a write for an attempt that "
                       "is not current changes nothing", param="attempt", code="stale_attempt")
    if controller_id is not None and row.state == RolloutState.RUNNING.value and row.lease_owner != controller_id:
        raise Conflict(f"rollout {row.id!r} is leased by {row.lease_owner!r}, not {controller_id!r}; a controller "
                       "that lost the lease may not write its state or reward", param="controller_id",
                       code="lease_lost")


def transition_rollout(conn: sa.Connection, rollout_id: str, patch: RolloutPatch, now: float) -> Rollout:
    """Move a rollout along the state machine; invalid moves and fenced-off writers raise Conflict (409)."""
    row = _load(conn, rollout_id, for_update=True)
    check_fence(row, patch.attempt, patch.controller_id)
    current, target = RolloutState(row.state), patch.state
    if not can_transition(current, target):
        raise InvalidTransition(f"rollout {rollout_id!r}: {current} -> {target} is not allowed "
                                f"(allowed from {current}: {_allowed(current)})", param="state")
    if target == RolloutState.FAILED and patch.failure_kind is None:
        raise BadRequest("state=failed needs failure_kind 'agent' or 'infra'", param="failure_kind")
    if target != RolloutState.FAILED and patch.failure_kind is not None:
        raise BadRequest(f"failure_kind is only valid with state=failed, not {target}", param="failure_kind")
    if patch.reason is not None and not (target == RolloutState.QUEUED or patch.failure_kind == FailureKind.INFRA):
        raise BadRequest(f"reason {patch.reason!r} names an infra failure: it is only valid with state=queued or "
                         f"state=failed with failure_kind 'infra', not {target} {patch.failure_kind or ''}".rstrip(),
                         param="reason")
    if target == RolloutState.QUEUED:  # a requeue: the ended attempt's reward goes with it
        conn.execute(schema.rollouts.update().where(R.id == rollout_id).values(
            state=target.value, lease_owner=None, lease_expires_at=None, error=to_column(patch.error), reward=None))
    elif target in TERMINAL_STATES:
        _finish(conn, rollout_id, target, patch.failure_kind, patch.error, now)
    else:
        conn.execute(schema.rollouts.update().where(R.id == rollout_id).values(state=target.value))
    _event(conn, rollout_id, row.attempt, EventKind.STATE,
           {"state": target.value, "failure_kind": patch.failure_kind, "error": patch.error, "reason": patch.reason},
           now)
    return row_to_rollout(_load(conn, rollout_id))


def _allowed(state: RolloutState) -> str:
    return ", ".join(sorted(s.value for s in TRANSITIONS[state])) or "none, it is terminal"


def set_reward(conn: sa.Connection, rollout_id: str, reward: RewardIn, now: float) -> Rollout:
    """Record a running rollout's reward; refused on queued and cancelled rollouts and fenced writers. A finished
    rollout's reward is final: the same value again is an idempotent no-op, another value a Conflict."""
    row = _load(conn, rollout_id)
    check_fence(row, reward.attempt, reward.controller_id)
    if row.state in (RolloutState.QUEUED.value, RolloutState.CANCELLED.value):
        raise Conflict(f"rollout {rollout_id!r} is {row.state}; rewards are accepted once it has run")
    if row.state in TERMINAL_STATES:
        if row.reward is not None and row.reward == reward.reward:
            return row_to_rollout(row)
        raise Conflict(f"rollout {rollout_id!r} is {row.state} with reward {row.reward}; a finished rollout's reward "
                       "is final (post it before setting the final state)", param="reward", code="reward_final")
    conn.execute(schema.rollouts.update().where(R.id == rollout_id).values(reward=reward.reward))
    _event(conn, rollout_id, row.attempt, EventKind.REWARD, {"reward": reward.reward, "details": reward.details}, now)
    return row_to_rollout(_load(conn, rollout_id))
