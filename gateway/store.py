"""The durable store: `SqlStore`, the one implementation of the store's role protocols (`gateway.store_roles`),
over SQLite in WAL mode or Postgres.

Every write goes through one `GroupCommitter`, so an operation's result is returned only once it is committed.
Reads use pooled connections in worker threads. The state machine is enforced here: an invalid transition raises
`InvalidTransition` (HTTP 409).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson
import sqlalchemy as sa

from gateway import artifacts, call_fence, schema
from gateway.artifacts import ArtifactInfo
from gateway.committer import StoreBusy, make_committer
from gateway.errors import BadRequest, Conflict, NotFound, PayloadTooLarge, StoreUnavailable
from gateway.nul_text import escape_columns, to_column
from gateway.numbering import StoreNumbers
from gateway.records import (
    TERMINAL_STATES,
    CallRecord,
    CallStatus,
    Event,
    EventKind,
    FinishedPage,
    ModelIn,
    ModelRecord,
    RewardIn,
    Rollout,
    RolloutPatch,
    RolloutSpec,
)
from gateway.rollout_ops import (
    claim_rollouts,
    create_rollouts,
    renew_lease,
    row_to_rollout,
    set_reward,
    transition_rollout,
)
from gateway.sql import make_engine
from gateway.store_roles import RolloutBrief, Store, StoredContinuation
from gateway.tokens import call_row_to_record, record_memory_bytes
from gateway.wal_checkpoint import WalCheckpointer

log = logging.getLogger("harnessrl.gateway")


class SqlStore:
    """`Store` (every role's protocol, `gateway.store_roles`) over SQLAlchemy; one process owns the writer."""

    def __init__(self, url: str, *, sqlite_synchronous: str = "NORMAL", cache_rollouts: bool = True,
                 lock_wait_s: float = 0.75) -> None:
        self.url = url
        database = sa.engine.make_url(url).database if url.startswith("sqlite") else None
        on_file = database not in (None, "", ":memory:")
        self._engine = make_engine(url, sqlite_synchronous=sqlite_synchronous, commits_checkpoint=not on_file)
        with self._engine.begin() as conn:
            schema.create_tables(conn)
        self.dialect = self._engine.dialect.name
        self._lock_wait_s = lock_wait_s
        self._finished = asyncio.Event()
        self._stopping = False  # the server is stopping: no long-poll waits (`stop_waiting`)
        commits_wait_on_io = not url.startswith("sqlite") or sqlite_synchronous.upper() in ("FULL", "EXTRA")
        self._committer = make_committer(self._engine, commits_wait_on_io=commits_wait_on_io,
                                         lock_wait_s=lock_wait_s)
        self._checkpointer = WalCheckpointer(database) if on_file else None  # checkpoints off the commit path
        self._cache_rollouts = cache_rollouts
        self._briefs: dict[str, RolloutBrief] = {}
        self._seqs: dict[tuple[str, int], int] = {}
        self._call_bytes: dict[tuple[str, int], int] = {}  # recorded call bytes per attempt (`charge_call_bytes`)
        self._numbering: asyncio.Event | None = None  # set once calls are numbered in the store (`share_numbering`)
        self.numbers_until = math.inf  # monotonic time after which this gateway numbers no call: its heartbeat is
        # late, and a gateway starting meanwhile may count it gone and number calls on its own (`gateway.fleet`)
        self._numbers: StoreNumbers | None = None
        self._secret: bytes | None = None

    @property
    def shared(self) -> bool:
        """Whether calls are numbered in the store (several gateways on it), not in this process's memory."""
        return self._numbering is not None

    # -- plumbing -------------------------------------------------------------------------------------------

    async def _write(self, fn, *, rollout_id: str | None = None, finishes: bool = False) -> Any:
        try:
            with unavailable_as_503():
                return await self._committer.run(fn)
        finally:
            if rollout_id is not None:
                self._briefs.pop(rollout_id, None)
            if finishes:
                self._finished.set()

    async def _read(self, fn) -> Any:
        def run() -> Any:
            with unavailable_as_503(), self._engine.connect() as conn:
                return fn(conn)
        return await asyncio.to_thread(run)

    async def fleet_read(self, fn) -> Any:
        """Run `fn(conn)` on a pooled connection (the gateways' heartbeats and pause, `gateway.fleet`)."""
        return await self._read(fn)

    async def fleet_write(self, fn) -> Any:
        """Run the write `fn(conn)` in a transaction of its own: on PostgreSQL on a pooled connection, beside the
        writer's batches (a heartbeat never waits in, or holds up, the calls' group commit); on SQLite through the
        one writer."""
        if self.dialect == "sqlite":
            return await self._write(fn)

        def run() -> Any:
            with unavailable_as_503(), self._engine.begin() as conn:
                return fn(conn)
        return await asyncio.to_thread(run)

    def close(self) -> None:
        """Flush pending writes and release connections."""
        self._committer.close()
        if self._checkpointer is not None:
            self._checkpointer.close()
        self._engine.dispose()

    async def close_numbering(self) -> None:
        """Close the connection that takes call numbers (several gateways), if one was opened."""
        if self._numbers is not None:
            await self._numbers.close()

    # -- rollouts -------------------------------------------------------------------------------------------

    async def create_rollouts(self, specs: Sequence[RolloutSpec]) -> list[tuple[Rollout, bool]]:
        """Create rollouts all-or-nothing; an existing id with the same spec is returned with created=False."""
        ids = [spec.id for spec in specs]
        if len(set(ids)) != len(ids):
            raise BadRequest("rollout ids must be unique within one request", param="rollouts")
        return await self._write(lambda conn: create_rollouts(conn, specs, time.time()))

    async def get_rollout(self, rollout_id: str) -> Rollout:
        """One rollout, or NotFound."""
        row = await self._read(lambda conn: conn.execute(
            sa.select(schema.rollouts).where(schema.rollouts.c.id == rollout_id)).first())
        if row is None:
            raise NotFound(f"rollout {rollout_id!r} does not exist", param="rollout_id")
        return row_to_rollout(row)

    async def brief(self, rollout_id: str, *, fresh: bool = False) -> RolloutBrief:
        """State, attempt and mode of a rollout, cached for the proxy hot path (`fresh`: read from the store, as after
        another gateway changed the rollout)."""
        cached = None if fresh else self._briefs.get(rollout_id)
        if cached is not None:
            return cached
        rollout = await self.get_rollout(rollout_id)
        brief = RolloutBrief(rollout.state, rollout.attempt, rollout.mode, rollout.sampling_seed,
                             rollout.calls_closed_at is not None)
        if self._cache_rollouts:
            if len(self._briefs) >= BRIEF_CACHE_MAX:  # bounded: the oldest tenth goes (read again when asked)
                for stale in list(itertools.islice(self._briefs, BRIEF_CACHE_MAX // 10)):
                    del self._briefs[stale]
            self._briefs[rollout_id] = brief
        return brief

    async def claim(self, controller_id: str, limit: int, lease_s: float) -> list[Rollout]:
        """Requeue or fail rollouts whose lease expired, then lease up to `limit` queued rollouts."""
        claimed, expired_ids = await self._write(
            lambda conn: claim_rollouts(conn, controller_id, limit, lease_s, time.time()), finishes=True)
        for rollout_id in [*expired_ids, *(r.id for r in claimed)]:
            self._briefs.pop(rollout_id, None)
        return claimed

    async def renew_lease(self, rollout_id: str, controller_id: str, lease_s: float, *,
                          close_calls: bool = False) -> Rollout:
        """Extend the lease of a running rollout held by `controller_id` (`close_calls`: and record no more calls of
        its attempt)."""
        return await self._write(lambda conn: renew_lease(conn, rollout_id, controller_id, lease_s, time.time(),
                                                          close_calls=close_calls), rollout_id=rollout_id)

    async def transition(self, rollout_id: str, patch: RolloutPatch) -> Rollout:
        """Apply a state change allowed by the state machine."""
        return await self._write(lambda conn: transition_rollout(conn, rollout_id, patch, time.time()),
                                 rollout_id=rollout_id, finishes=True)

    async def set_reward(self, rollout_id: str, reward: RewardIn) -> Rollout:
        """Record the grader's reward (and a reward event), fenced by its attempt and lease."""
        return await self._write(lambda conn: set_reward(conn, rollout_id, reward, time.time()),
                                 rollout_id=rollout_id)

    async def list_finished(self, after: int, limit: int, wait_s: float) -> FinishedPage:
        """Rollouts that reached a terminal state after cursor `after`; waits up to `wait_s` for the first one."""
        deadline = time.monotonic() + wait_s
        while True:
            self._finished.clear()
            page = await self._read(lambda conn: _finished_page(conn, after, limit))
            remaining = deadline - time.monotonic()
            if page.rollouts or remaining <= 0 or self._stopping:
                return page
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._finished.wait(), timeout=remaining)

    def stop_waiting(self) -> None:
        """The server is stopping: the long-polls in flight answer their page now, and later ones do not wait."""
        self._stopping = True
        self._finished.set()

    # -- events ---------------------------------------------------------------------------------------------

    async def add_event(self, rollout_id: str, kind: EventKind, payload: dict[str, Any], *,
                        attempt: int | None = None, quota_bytes: int | None = None) -> Event:
        """Append an event to a rollout's log (409 when `attempt` is given and is no longer the current one; 413 when
        the attempt's event payloads would pass `quota_bytes`)."""
        return await self._write(lambda conn: _add_event(conn, rollout_id, kind, payload, time.time(), attempt,
                                                         quota_bytes))

    async def list_events(self, rollout_id: str) -> list[Event]:
        """A rollout's events in order."""
        await self.get_rollout(rollout_id)
        rows = await self._read(lambda conn: conn.execute(
            sa.select(schema.events).where(schema.events.c.rollout_id == rollout_id)
            .order_by(schema.events.c.id)).all())
        return [Event(id=r.id, rollout_id=r.rollout_id, attempt=r.attempt, kind=r.kind,
                      payload=orjson.loads(r.payload), created_at=r.created_at) for r in rows]

    # -- calls ----------------------------------------------------------------------------------------------

    async def next_call_seq(self, rollout_id: str, attempt: int) -> int:
        """The arrival number of a new call within its rollout attempt: counted in memory while this gateway is the
        store's only one, taken in the store once several share it (`share_numbering`)."""
        if time.monotonic() > self.numbers_until:
            raise StoreUnavailable("this gateway's heartbeat to the store is late (the store is slow or out of reach):"
                                   " it numbers no call until the heartbeat gets through; nothing was forwarded, retry "
                                   f"after {StoreUnavailable.retry_after_s} s")
        if self._numbering is not None:
            return await self._take_number(rollout_id, attempt)
        key = (rollout_id, attempt)
        if key not in self._seqs:
            c = schema.calls.c
            last = await self._read(lambda conn: conn.execute(
                sa.select(sa.func.max(c.seq)).where(c.rollout_id == rollout_id, c.attempt == attempt)).scalar())
            if self._numbering is not None:  # another gateway joined meanwhile
                return await self._take_number(rollout_id, attempt)
            if key not in self._seqs:
                self._seqs[key] = -1 if last is None else last
        self._seqs[key] += 1
        return self._seqs[key]

    async def share_numbering(self) -> None:
        """Number calls in the store from now on (another gateway shares it: `gateway.numbering`, the rollout's row
        fenced by its attempt and state), once the numbers this process handed out are written there (calls holding
        them may still be in flight). PostgreSQL only; kept while the process lives."""
        if self._numbering is not None:
            return
        if self.dialect != "postgresql":
            raise RuntimeError(f"several gateways need a PostgreSQL store, not {self.dialect}")
        self._numbering = asyncio.Event()
        given = [{"id": rollout_id, "attempt": attempt, "next": last + 1}
                 for (rollout_id, attempt), last in self._seqs.items()]
        self._seqs = {}
        self._numbers = StoreNumbers(self.url, self._lock_wait_s)
        try:
            for retry in range(5):
                try:
                    if given:
                        await self.fleet_write(lambda conn: conn.execute(RAISE_NEXT_SEQ, given))
                    break
                except StoreUnavailable as exc:
                    log.warning("writing this gateway's call numbers to the store failed (%s); try %d of 5",
                                exc, retry + 1)
                    await asyncio.sleep(0.2)
        finally:
            self._numbering.set()

    async def _take_number(self, rollout_id: str, attempt: int) -> int:
        if not self._numbering.is_set():
            await self._numbering.wait()
        seq = await self._numbers.take(rollout_id, attempt)
        if seq is None:  # the attempt ended, or the rollout finished, on another gateway: this one's cache is stale
            self._briefs.pop(rollout_id, None)
            rollout = await self.get_rollout(rollout_id)
            if rollout.state in TERMINAL_STATES:
                raise Conflict(f"rollout {rollout_id!r} is {rollout.state}; calls are accepted only while it is "
                               "queued or running", code="rollout_finished")
            closed = ", its calls closed by the controller" if rollout.calls_closed_at is not None else ""
            raise Conflict(f"attempt {attempt} of rollout {rollout_id!r} is over (the rollout is at attempt "
                           f"{rollout.attempt}, {rollout.state}{closed}); nothing was forwarded", code="stale_attempt")
        return seq

    async def charge_call_bytes(self, rollout_id: str, attempt: int, size: int, budget_bytes: int,
                                what: str) -> None:
        """Count `size` more bytes of recorded calls (a request on arrival, an answer at its recording) against the
        attempt's budget, or PayloadTooLarge (413 `call_bytes_quota_exceeded`, nothing counted) when they would pass
        `budget_bytes`. Counted in this process's memory: an addition per call, seeded once per attempt (the first
        time this gateway sees it) with the bytes the store already holds for it (`CALL_BYTES`)."""
        key = (rollout_id, attempt)
        used = self._call_bytes.get(key)
        if used is None:
            c = schema.calls.c
            stored = await self._read(lambda conn: conn.execute(sa.select(CALL_BYTES).where(
                c.rollout_id == rollout_id, c.attempt == attempt)).scalar())
            used = self._call_bytes.get(key)
            if used is None:
                if len(self._call_bytes) >= CALL_BYTES_CACHE_MAX:  # bounded: the oldest tenth is read again
                    for stale in list(itertools.islice(self._call_bytes, CALL_BYTES_CACHE_MAX // 10)):
                        del self._call_bytes[stale]
                used = int(stored or 0)
        if used + size > budget_bytes:
            self._call_bytes[key] = used
            raise PayloadTooLarge(
                f"attempt {attempt} of rollout {rollout_id!r} has recorded {used} bytes of calls (requests and "
                f"answers); this {what} of {size} bytes would pass the limit of {budget_bytes} bytes per attempt "
                "(max_call_bytes_per_attempt): the call is not recorded. Send shorter requests (compact the context) "
                "or raise the gateway's max_call_bytes_per_attempt", code="call_bytes_quota_exceeded")
        self._call_bytes[key] = used + size

    async def insert_call(self, row: dict[str, Any]) -> None:
        """Durably record one call (group-committed). Refused (409, nothing recorded) when its attempt is no longer
        the rollout's live one at the commit (`gateway.call_fence`: `rollout_finished`, `stale_attempt`) or its
        number is already recorded (`duplicate_call`)."""
        row = escape_columns(row, CALL_TEXT_COLUMNS)
        try:
            with unavailable_as_503():
                await self._committer.run_insert(schema.calls, row)
        except sa.exc.IntegrityError as exc:
            why = call_fence.refusal(exc, schema.UNIQUE_CALL_NUMBER)
            if why is None:
                raise
            raise await self._refused_call(row, why) from None

    async def _refused_call(self, row: dict[str, Any], why: call_fence.Refusal) -> Conflict:
        """The 409 of a call row the store refused; the rollout's cached brief, which let the call in, is dropped."""
        self._briefs.pop(row["rollout_id"], None)
        rollout = await self.get_rollout(row["rollout_id"]) if why == call_fence.Refusal.ENDED else None
        return call_fence.conflict(row, why, rollout)

    async def list_calls(self, rollout_id: str, attempt: int | None, *, after_seq: int | None = None,
                         limit: int | None = None, max_bytes: int | None = None) -> list[CallRecord]:
        """A rollout's calls ordered by attempt and arrival; a page of them with `after_seq` (only the calls numbered
        above it), `limit` (at most that many) and `max_bytes` (no more calls than fit in that many stored bytes,
        `CALL_ROW_BYTES`, but always the first), which need `attempt`."""
        await self.get_rollout(rollout_id)
        c = schema.calls.c
        query = sa.select(*schema.RECORD_COLUMNS).where(c.rollout_id == rollout_id)
        if attempt is not None:
            query = query.where(c.attempt == attempt)
        if (after_seq is not None or limit is not None or max_bytes is not None) and attempt is None:
            raise BadRequest("a page of calls (after_seq, limit, max_bytes) is of one attempt: name it",
                             param="attempt")
        if after_seq is not None:
            query = query.where(c.seq > after_seq)
        if max_bytes is not None:
            last = await self._last_seq_within(rollout_id, attempt, after_seq, limit, max_bytes)
            if last is None:
                return []
            query = query.where(c.seq <= last)
        query = query.order_by(c.attempt, c.seq)
        if limit is not None:
            query = query.limit(limit)
        rows = await self._read(lambda conn: conn.execute(query).all())
        return [call_row_to_record(row) for row in rows]

    async def call_follows(self, rollout_id: str, attempt: int, seq: int) -> bool:
        """Whether the attempt has a call numbered above `seq` (its number only is read)."""
        c = schema.calls.c
        query = sa.select(c.seq).where(c.rollout_id == rollout_id, c.attempt == attempt, c.seq > seq).limit(1)
        return await self._read(lambda conn: conn.execute(query).first()) is not None

    async def _last_seq_within(self, rollout_id: str, attempt: int, after_seq: int | None, limit: int | None,
                               max_bytes: int) -> int | None:
        """The number of the last call of a page that fits in `max_bytes` stored bytes (at least one call; None when
        there is none), read from the rows' sizes, not their contents."""
        c = schema.calls.c
        query = sa.select(c.seq, CALL_ROW_BYTES).where(c.rollout_id == rollout_id, c.attempt == attempt)
        if after_seq is not None:
            query = query.where(c.seq > after_seq)
        query = query.order_by(c.seq).limit(limit or CALL_SIZES_PAGE)
        sizes = await self._read(lambda conn: conn.execute(query).all())
        last, used = None, 0
        for seq, size in sizes:
            used += int(size or 0)
            if last is not None and used > max_bytes:
                break
            last = seq
        return last

    async def recent_calls(self, rollout_id: str, attempt: int, kind: str, limit: int, *,
                           max_request_bytes: int | None = None,
                           admit: Callable[[int], None] | None = None) -> list[CallRecord]:
        """The attempt's last `limit` ok main calls of `kind`, latest first (the index on rollout, attempt, seq read
        backwards): what `gateway.recorded_turns` may continue, without reading the attempt's other calls. Only
        those whose stored request is at most `max_request_bytes` long; `admit` is told the memory the records will
        take (`record_memory_bytes`) before they are built, and may refuse it by raising."""
        c = schema.calls.c
        query = (sa.select(*schema.RECORD_COLUMNS)
                 .where(c.rollout_id == rollout_id, c.attempt == attempt, c.kind == kind,
                        c.status == CallStatus.OK.value, c.side.is_(False))
                 .order_by(c.seq.desc()).limit(limit))
        if max_request_bytes is not None:
            query = query.where(sa.func.length(c.request) <= max_request_bytes)
        rows = await self._read(lambda conn: conn.execute(query).all())
        if admit is not None and rows:
            admit(sum(record_memory_bytes(row) for row in rows))
        return [call_row_to_record(row) for row in rows]

    async def continuation(self, rollout_id: str, attempt: int, response_id: str, kind: str,
                           max_bytes: int | None = None) -> StoredContinuation | None:
        """The stored continuation of the ok `kind` answer `response_id` of that rollout attempt (one indexed
        lookup, `schema.CONTINUED`), or None when no such answer has one (none recorded, or an older gateway's);
        one longer than `max_bytes` is not read (only its size is)."""
        c = schema.calls.c
        size = sa.func.length(c.continuation)
        data = c.continuation if max_bytes is None else sa.case((size <= max_bytes, c.continuation), else_=None)
        query = (sa.select(size, data)
                 .where(c.rollout_id == rollout_id, c.attempt == attempt, c.response_id == to_column(response_id),
                        c.continuation.isnot(None), c.kind == kind, c.status == CallStatus.OK.value)
                 .limit(1))
        row = await self._read(lambda conn: conn.execute(query).first())
        return None if row is None else StoredContinuation(int(row[0]), row[1])

    # -- models ---------------------------------------------------------------------------------------------

    async def register_model(self, model: ModelIn) -> ModelRecord:
        """Add or update one upstream endpoint."""
        record = ModelRecord(name=model.name, base_url=model.base_url.rstrip("/"), version=model.version,
                             served_name=model.served_name or model.name)
        await self._write(lambda conn: _upsert_model(conn, record))
        return record

    async def set_model_version(self, name: str, version: int) -> list[ModelRecord]:
        """Set the policy version of every endpoint named `name`."""
        updated = await self._write(lambda conn: conn.execute(
            schema.models.update().where(schema.models.c.name == name).values(version=version)).rowcount)
        if not updated:
            raise NotFound(f"model {name!r} is not registered; register it with POST /v1/admin/models", param="name")
        return [m for m in await self.list_models() if m.name == name]

    async def delete_model(self, name: str, base_url: str | None) -> int:
        """Remove endpoints of a model (one endpoint when `base_url` is given)."""
        table = schema.models
        query = table.delete().where(table.c.name == name)
        if base_url is not None:
            query = query.where(table.c.base_url == base_url.rstrip("/"))
        return await self._write(lambda conn: conn.execute(query).rowcount)

    async def list_models(self) -> list[ModelRecord]:
        """Every registered endpoint."""
        rows = await self._read(lambda conn: conn.execute(
            sa.select(schema.models).order_by(schema.models.c.name, schema.models.c.base_url)).all())
        return [ModelRecord(name=r.name, base_url=r.base_url, version=r.version, served_name=r.served_name)
                for r in rows]

    # -- artifacts ------------------------------------------------------------------------------------------

    async def put_artifact(self, rollout_id: str, name: str, data: bytes, *, refuse_finished: bool,
                           attempt: int | None = None, quota_bytes: int | None = None) -> ArtifactInfo:
        """Store a blob under the rollout's current attempt (409 on a finished rollout with `refuse_finished`, or
        when `attempt` is given and is no longer the current one; 413 past `quota_bytes` per attempt)."""
        return await self._write(lambda conn: artifacts.put_artifact(
            conn, rollout_id, name, data, time.time(), refuse_finished=refuse_finished, attempt=attempt,
            quota_bytes=quota_bytes))

    async def get_artifact(self, rollout_id: str, name: str, attempt: int | None) -> bytes:
        """A stored blob of `attempt` (default: the current one), or NotFound."""
        return await self._read(lambda conn: artifacts.get_artifact(conn, rollout_id, name, attempt))

    async def artifact_size(self, rollout_id: str, name: str, attempt: int | None) -> int:
        """The length of a stored blob of `attempt` (default: the current one), its bytes unread; or NotFound."""
        return await self._read(lambda conn: artifacts.artifact_size(conn, rollout_id, name, attempt))

    async def secret(self) -> bytes:
        """The key-minting secret, created once and kept in the store so keys survive restarts."""
        if self._secret is None:
            self._secret = await self._write(_get_or_create_secret)
        return self._secret


BRIEF_CACHE_MAX = 100_000
"""Rollout briefs a gateway keeps in memory (about 200 bytes each); past it the oldest tenth is dropped."""
CALL_BYTES_CACHE_MAX = 100_000
"""Attempts whose recorded call bytes a gateway keeps in memory; past it the oldest tenth is dropped (read again)."""
CALL_TEXT_COLUMNS = ("model", "error", "response_id", "response_text", "finish_reason")
"""A call row's text columns that may carry the harness's or the engine's text: NUL-escaped (`gateway.nul_text`)."""
def stored_length(*columns: sa.Column) -> sa.ColumnElement:
    """The summed stored lengths of a row's `columns` (a NULL counts 0)."""
    return sum((sa.func.coalesce(sa.func.length(column), 0) for column in columns), sa.literal(0))


_calls = schema.calls.c
CALL_BYTES = sa.func.coalesce(sa.func.sum(stored_length(_calls.request, _calls.response_raw, _calls.continuation)), 0)
"""The bytes an attempt's recorded calls count against `max_call_bytes_per_attempt`: request, answer, continuation."""
CALL_ROW_BYTES = stored_length(_calls.request, _calls.response_raw, _calls.continuation, _calls.prompt_token_ids,
                               _calls.response_token_ids, _calls.response_logprobs, _calls.extra_choices,
                               _calls.sampling, _calls.response_text)
"""A call row's stored bytes, as a page of calls counts them (`list_calls`' `max_bytes`): its bodies and token data."""
CALL_SIZES_PAGE = 10_000
"""Sizes read at most for a page bounded by bytes only (an attempt's calls are capped, `max_calls_per_attempt`)."""
RAISE_NEXT_SEQ = sa.text("UPDATE rollouts SET next_seq = GREATEST(next_seq, :next)"
                         " WHERE id = :id AND attempt = :attempt")


class _UnavailableAs503:
    """A database that is locked past the write's deadline, busy, full or unreachable as StoreUnavailable (503 with
    Retry-After), naming the database's own words (a class, not contextlib's generator: on every call's insert)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, traceback) -> None:
        if isinstance(exc, StoreBusy):
            raise StoreUnavailable(f"the store is busy: {exc}; nothing was written, retry after "
                                   f"{StoreUnavailable.retry_after_s} s") from None
        if isinstance(exc, sa.exc.OperationalError):
            raise StoreUnavailable(f"the store is unavailable ({exc.orig}); nothing was written, retry after "
                                   f"{StoreUnavailable.retry_after_s} s") from None


def unavailable_as_503() -> _UnavailableAs503:
    """A block whose locked, busy, full or unreachable database is answered 503 (`_UnavailableAs503`)."""
    return _UnavailableAs503()


def _finished_page(conn: sa.Connection, after: int, limit: int) -> FinishedPage:
    r = schema.rollouts.c
    rows = conn.execute(sa.select(schema.rollouts).where(r.finished_seq > after)
                        .order_by(r.finished_seq).limit(limit)).all()
    rollouts = [row_to_rollout(row) for row in rows]
    return FinishedPage(rollouts=rollouts, cursor=rollouts[-1].finished_seq if rollouts else after)


def _add_event(conn: sa.Connection, rollout_id: str, kind: EventKind, payload: dict[str, Any], now: float,
               expected_attempt: int | None, quota_bytes: int | None) -> Event:
    attempt = conn.execute(sa.select(schema.rollouts.c.attempt)
                           .where(schema.rollouts.c.id == rollout_id)).scalar()
    if attempt is None:
        raise NotFound(f"rollout {rollout_id!r} does not exist", param="rollout_id")
    if expected_attempt is not None and attempt != expected_attempt:
        raise Conflict(f"rollout {rollout_id!r} moved on to attempt {attempt}; an event of attempt "
                       f"{expected_attempt} is refused", code="stale_attempt")
    raw = orjson.dumps(payload)
    if quota_bytes is not None:
        _check_event_quota(conn, rollout_id, attempt, len(raw), quota_bytes)
    event_id = conn.execute(schema.events.insert().values(
        rollout_id=rollout_id, attempt=attempt, kind=kind.value, payload=raw, created_at=now)).inserted_primary_key[0]
    return Event(id=event_id, rollout_id=rollout_id, attempt=attempt, kind=kind, payload=payload, created_at=now)


def _check_event_quota(conn: sa.Connection, rollout_id: str, attempt: int, size: int, quota_bytes: int) -> None:
    e = schema.events.c
    used = conn.execute(sa.select(sa.func.coalesce(sa.func.sum(sa.func.length(e.payload)), 0)).where(
        e.rollout_id == rollout_id, e.attempt == attempt)).scalar()
    if used + size > quota_bytes:
        raise PayloadTooLarge(f"attempt {attempt} of rollout {rollout_id!r} has posted {used} bytes of events; this "
                              f"{size}-byte payload would pass the limit of {quota_bytes} bytes per attempt "
                              "(max_event_bytes_per_attempt)", param="payload", code="event_quota_exceeded")


def _upsert_model(conn: sa.Connection, record: ModelRecord) -> None:
    table = schema.models
    key = (table.c.name == record.name) & (table.c.base_url == record.base_url)
    values = {"served_name": record.served_name, "version": record.version}
    if not conn.execute(table.update().where(key).values(**values)).rowcount:
        conn.execute(table.insert().values(name=record.name, base_url=record.base_url, **values))


def _get_or_create_secret(conn: sa.Connection) -> bytes:
    value = conn.execute(sa.select(schema.meta.c.value).where(schema.meta.c.key == "key_secret")).scalar()
    if value is None:
        value = secrets.token_bytes(32)
        conn.execute(schema.meta.insert().values(key="key_secret", value=value))
    return value


__all__ = ["Conflict", "RolloutBrief", "SqlStore", "Store"]
