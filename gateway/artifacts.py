"""Per-rollout-attempt artifacts: small opaque blobs (a packed working directory) stored next to the rollout.

An artifact is keyed by (rollout id, attempt, name); a write replaces the blob of the rollout's current attempt.
The harness may write only while its rollout is not finished; the admin may always write.
"""

from __future__ import annotations

import re
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field

from gateway import schema
from gateway.errors import BadRequest, Conflict, NotFound, PayloadTooLarge
from gateway.records import TERMINAL_STATES

NAME_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,100}")
A = schema.artifacts.c
R = schema.rollouts.c


class ArtifactInfo(BaseModel):
    """What was stored by a PUT."""

    model_config = ConfigDict(frozen=True)

    rollout_id: str = Field(description="The rollout the artifact belongs to.")
    attempt: int = Field(description="The attempt it was stored under (the rollout's attempt at the time).")
    name: str = Field(description="The artifact's name.")
    size_bytes: int = Field(description="Length of the blob in bytes.")
    created_at: float = Field(description="Unix time it was stored.")


def check_name(name: str) -> str:
    """The name itself, or BadRequest when it is not 1-100 of [A-Za-z0-9._-] (or is '.' / '..')."""
    if NAME_PATTERN.fullmatch(name) is None or name in (".", ".."):
        raise BadRequest(f"artifact name {name!r} is invalid; use 1-100 characters of A-Z a-z 0-9 . _ - "
                         "(e.g. workdir.tar.gz)", param="name")
    return name


def _rollout(conn: sa.Connection, rollout_id: str) -> sa.Row:
    row = conn.execute(sa.select(R.state, R.attempt).where(R.id == rollout_id)).first()
    if row is None:
        raise NotFound(f"rollout {rollout_id!r} does not exist", param="rollout_id")
    return row


def put_artifact(conn: sa.Connection, rollout_id: str, name: str, data: bytes, now: float, *,
                 refuse_finished: bool, attempt: int | None = None, quota_bytes: int | None = None) -> ArtifactInfo:
    """Store (or replace) `name` under the rollout's current attempt; Conflict on a finished rollout if asked, or
    when `attempt` is given and is no longer the current one; PayloadTooLarge when the attempt's artifacts would
    pass `quota_bytes`."""
    rollout = _rollout(conn, rollout_id)
    if refuse_finished and rollout.state in TERMINAL_STATES:
        raise Conflict(f"rollout {rollout_id!r} is {rollout.state}; its artifacts can no longer be written by the "
                       "harness", code="rollout_finished")
    if attempt is not None and rollout.attempt != attempt:
        raise Conflict(f"rollout {rollout_id!r} moved on to attempt {rollout.attempt}; an artifact of attempt "
                       f"{attempt} is refused", code="stale_attempt")
    if quota_bytes is not None:
        _check_quota(conn, rollout_id, rollout.attempt, name, len(data), quota_bytes)
    key = (A.rollout_id == rollout_id) & (A.attempt == rollout.attempt) & (A.name == name)
    conn.execute(schema.artifacts.delete().where(key))
    conn.execute(schema.artifacts.insert().values(rollout_id=rollout_id, attempt=rollout.attempt, name=name,
                                                  data=data, size_bytes=len(data), created_at=now))
    return ArtifactInfo(rollout_id=rollout_id, attempt=rollout.attempt, name=name, size_bytes=len(data),
                        created_at=now)


def _check_quota(conn: sa.Connection, rollout_id: str, attempt: int, name: str, size: int, quota_bytes: int) -> None:
    others = conn.execute(sa.select(sa.func.coalesce(sa.func.sum(A.size_bytes), 0)).where(
        (A.rollout_id == rollout_id) & (A.attempt == attempt) & (A.name != name))).scalar()
    if others + size > quota_bytes:
        raise PayloadTooLarge(f"attempt {attempt} of rollout {rollout_id!r} holds {others} bytes of other artifacts; "
                              f"{name!r} ({size} bytes) would pass the limit of {quota_bytes} bytes per attempt "
                              "(max_artifact_bytes_per_attempt)", param="name", code="artifact_quota_exceeded")


def get_artifact(conn: sa.Connection, rollout_id: str, name: str, attempt: int | None) -> bytes:
    """The blob of `name` for `attempt` (default: the rollout's current attempt), or NotFound."""
    return _artifact_column(conn, rollout_id, name, attempt, A.data)


def artifact_size(conn: sa.Connection, rollout_id: str, name: str, attempt: int | None) -> int:
    """The length of the blob of `name` for `attempt` (default: the current one), its bytes unread; or NotFound."""
    return _artifact_column(conn, rollout_id, name, attempt, A.size_bytes)


def _artifact_column(conn: sa.Connection, rollout_id: str, name: str, attempt: int | None, column: sa.Column) -> Any:
    rollout = _rollout(conn, rollout_id)
    number = rollout.attempt if attempt is None else attempt
    data = conn.execute(sa.select(column).where(
        (A.rollout_id == rollout_id) & (A.attempt == number) & (A.name == name))).scalar()
    if data is None:
        raise NotFound(f"rollout {rollout_id!r} has no artifact {name!r} for attempt {number}; it is stored by a "
                       "PUT to .../artifacts/{name} during that attempt", param="name")
    return data
