"""The store's fence on call rows: a call is recorded only for its rollout's live attempt, and only once per number.

A call row commits only while its attempt is the rollout's running one and the controller has not closed its calls
(it does when the harness ended, before it reads the calls to grade them: `LeaseRenewal.close_calls`), or for attempt
0 of a rollout never claimed (direct use before a controller runs it). The check is a trigger on `calls` (`BEFORE
INSERT`), so it runs inside the insert the group commit already makes, in the same transaction: no statement or round
trip of its own, whichever gateway (or older code) inserts the row, and whatever a gateway's cached brief said when
the call arrived. On SQLite the writer holds the database's write lock for the whole transaction, so no state change
can come between the check and the commit. On PostgreSQL the trigger takes the rollout's row `FOR KEY SHARE`, and every
change that ends an attempt or closes its calls takes the row `FOR UPDATE` first (`rollout_ops`): such a change waits
for the call's commit (the call was recorded while the attempt ran), and a call whose check comes after the change
sees the new state (READ COMMITTED re-reads the row it waited for) and is refused. The call numbers other gateways
take on the same row (`numbering`, `FOR NO KEY UPDATE`) do not conflict with it: a share lock there made numbering
wait on every in-flight batch of calls, past the lock budget under load (503s after a gateway's `kill -9`).

A refused row fails its insert with `FENCE_MARK` in the database's message; `refusal` tells it, and a duplicate of
`(rollout_id, attempt, seq)` (the unique index `schema.UNIQUE_CALL_NUMBER`), from the driver's error.
"""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from gateway.errors import Conflict
from gateway.records import TERMINAL_STATES, Rollout

log = logging.getLogger("harnessrl.gateway")

FENCE_MARK = "harnessrl_call_fence"
"""In the message of a call row refused because its attempt is not the rollout's live one."""
TRIGGER = "calls_live_attempt_v3"
"""The trigger's name; a new version of its rule gets a new name and drops the older ones (`OLD_TRIGGERS`)."""
OLD_TRIGGERS = ("calls_live_attempt_v1", "calls_live_attempt_v2")
"""Earlier versions of the trigger (v1: without the closed calls; v2: a share lock that numbering waited on)."""
LIVE = ("r.id = NEW.rollout_id AND r.attempt = NEW.attempt AND r.calls_closed_at IS NULL"
        " AND (r.state = 'running' OR (r.state = 'queued' AND r.attempt = 0))")
"""The rollout row `r` a call row `NEW` may be recorded for: its attempt running and its calls not closed by the
controller (the harness ended), or attempt 0 before any claim."""
MESSAGE = (f"{FENCE_MARK}: the attempt of this call is not the running attempt of its rollout (it ended, or the "
           "rollout finished); the call is not recorded")
"""The database's message of a refused row (no quote or percent sign: it sits in SQL string literals)."""

SQLITE_TRIGGER = f"""
CREATE TRIGGER IF NOT EXISTS {TRIGGER} BEFORE INSERT ON calls
WHEN NOT EXISTS (SELECT 1 FROM rollouts r WHERE {LIVE})
BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END
"""
POSTGRES_FUNCTION = f"""
CREATE OR REPLACE FUNCTION {TRIGGER}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1 FROM rollouts r WHERE {LIVE} FOR KEY SHARE;
  IF NOT FOUND THEN
    RAISE EXCEPTION '{MESSAGE}' USING ERRCODE = 'check_violation';
  END IF;
  RETURN NEW;
END $$
"""
POSTGRES_TRIGGER = f"CREATE TRIGGER {TRIGGER} BEFORE INSERT ON calls FOR EACH ROW EXECUTE FUNCTION {TRIGGER}()"
POSTGRES_INSTALL_LOCK = 0x6872_6C5F_6663  # "hrl_fc": gateways opening one store at once install the trigger once


class Refusal(StrEnum):
    """Why the store refused a call row."""

    ENDED = "ended"  # its attempt is not the rollout's live one
    DUPLICATE = "duplicate"  # its (rollout, attempt, seq) is already recorded


def install(conn: sa.Connection) -> bool:
    """Create the fence's trigger where it is missing (a new store, or one an older gateway wrote); whether it was
    created."""
    if conn.dialect.name == "sqlite":
        present = conn.exec_driver_sql("SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = ?",
                                       (TRIGGER,)).first()
        if not present:
            for old in OLD_TRIGGERS:
                conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {old}")
            conn.exec_driver_sql(SQLITE_TRIGGER)
        return not present
    if conn.dialect.name != "postgresql":
        raise ValueError(f"the call fence has no trigger for a {conn.dialect.name} store; use SQLite or PostgreSQL")
    conn.execute(sa.select(sa.func.pg_advisory_xact_lock(POSTGRES_INSTALL_LOCK)))
    present = conn.exec_driver_sql("SELECT 1 FROM pg_trigger WHERE tgname = %(name)s AND tgrelid = 'calls'::regclass",
                                   {"name": TRIGGER}).first()
    if not present:
        for old in OLD_TRIGGERS:
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {old} ON calls")
            conn.exec_driver_sql(f"DROP FUNCTION IF EXISTS {old}()")
        conn.exec_driver_sql(POSTGRES_FUNCTION)
        conn.exec_driver_sql(POSTGRES_TRIGGER)
    return not present


def refusal(exc: BaseException, unique_index: str) -> Refusal | None:
    """Why `exc`, an insert's failure, refused a call row: the fence, a duplicate number (the unique index named
    `unique_index`), or None for anything else."""
    if not isinstance(exc, sa.exc.IntegrityError):
        return None
    message = str(exc.orig)
    if FENCE_MARK in message:
        return Refusal.ENDED
    if unique_index in message or "UNIQUE constraint failed: calls.rollout_id, calls.attempt, calls.seq" in message:
        return Refusal.DUPLICATE
    return None


def conflict(row: dict[str, Any], why: Refusal, rollout: Rollout | None) -> Conflict:
    """The 409 answered for a call row the store refused (`rollout`: the rollout as it is now, for an ended attempt):
    `duplicate_call`, or `rollout_finished` / `stale_attempt` naming the state the rollout moved to."""
    rollout_id, attempt, seq = row["rollout_id"], row["attempt"], row["seq"]
    if why == Refusal.DUPLICATE or rollout is None:
        return Conflict(f"call {seq} of attempt {attempt} of rollout {rollout_id!r} is already recorded; a call "
                        "number is recorded once, this call was not", code="duplicate_call")
    log.info("refused call %s of rollout %s attempt %s at its commit: the rollout is %s at attempt %s",
             seq, rollout_id, attempt, rollout.state, rollout.attempt)
    code = "rollout_finished" if rollout.state in TERMINAL_STATES else "stale_attempt"
    if rollout.attempt == attempt and rollout.calls_closed_at is not None:
        why = "its harness ended and the controller closed its calls to grade them"
    else:
        why = f"the rollout is {rollout.state}, at attempt {rollout.attempt}"
    return Conflict(f"attempt {attempt} of rollout {rollout_id!r} took no more calls when this call was to be "
                    f"recorded ({why}: the attempt ended while the call was under way); the call is not recorded and "
                    "trains nothing", code=code)
