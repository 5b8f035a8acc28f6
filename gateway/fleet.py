"""Several gateways on one store: who is there, the pause they all honour, and how they number calls.

A PostgreSQL store may serve several gateway processes (replicas behind one Service). Each one
- heartbeats a row of `gateways` every `fleet_poll_s` (and at once when its pause state or drain changes): its calls
  in flight and held, whether it holds new calls, the pause it applied; a row older than `fleet_stale_s` (by the
  database's clock) is a gateway gone (killed), not waited for;
- reads, at the same beat, the store's pause (the `control` row an admin pause or resume on any gateway writes) and
  the registered models, and applies both (models first: calls released by a resume go to the updated engine);
- is woken at once, not at its next beat, by PostgreSQL's NOTIFY on `harnessrl_fleet`: sent with a pause or resume,
  a model change, a join, and a heartbeat whose pause or drain state changed (what a pause waits for);
- numbers its calls in memory while it is the store's only gateway (the hot path takes no extra round trip), and in
  the store (`SqlStore.share_numbering`) once another gateway is live: a joining gateway registers under an advisory
  lock, so two starting at once see each other, and starts serving only once every live gateway numbers in the store;
- numbers no call while its own heartbeat is late (`FENCE_SHARE`), since a gateway starting meanwhile may count it
  gone and number on its own.

`pause` writes the pause, holds this gateway's new calls and returns once every live gateway has applied that pause
and has nothing in flight (or the drain timeout passes); `resume` clears it, here at once, on the others when the
notification reaches them (at their next beat at the latest). The pause is kept in the store: a gateway started
while it holds starts holding, and `paused_s` is the store's (the same on every gateway).

A SQLite store has one writer and serves one gateway: a second gateway process on the same file is refused at start
(an exclusive lock on `<database>.gateway-lock`, released by the kernel when the process dies, kill -9 included).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import secrets
import socket
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from gateway import schema
from gateway.config import GatewayConfig
from gateway.pause import PauseGate
from gateway.records import GatewayPeer, ModelRecord, PauseResult
from gateway.routing import Router
from gateway.store import SqlStore

log = logging.getLogger("harnessrl.gateway")

JOIN_LOCK = 0x68726C67  # "hrlg": the advisory lock a joining gateway registers under
DRAIN_POLL_S = 0.02
"""How often a joining gateway reads the others' heartbeats while it waits for them to number in the store."""
DRAIN_READ_S = 0.25
"""How often a pause reads the other gateways' heartbeats while it waits for their drain, besides each notification."""
CHANNEL = "harnessrl_fleet"
"""The LISTEN/NOTIFY channel that wakes every gateway of the store."""
NOTIFY = sa.text(f"SELECT pg_notify('{CHANNEL}', '')")
JOIN_TIMEOUT_BEATS = 20
"""A joining gateway waits this many of the others' beats (fleet_poll_s) for them to number calls in the store."""
FORGET_AFTER_STALE = 10
"""A gateway row stale for this many fleet_stale_s is deleted by the next gateway that joins."""
FENCE_SHARE = 0.8
"""A gateway numbers no call once its last heartbeat is this share of fleet_stale_s old: it stops before any other
gateway may count it gone (and start numbering on its own), and numbers again only once every live gateway numbers in
the store."""


@dataclass(frozen=True)
class Control:
    """The store's pause."""

    paused: bool = False
    generation: int = 0
    paused_since: float | None = None
    paused_total_s: float = 0.0

    @property
    def paused_s(self) -> float:
        return self.paused_total_s + (max(0.0, time.time() - self.paused_since) if self.paused_since else 0.0)


def db_now() -> Any:
    """The database's clock in unix seconds (PostgreSQL): heartbeats of several machines compared on one clock."""
    return sa.func.extract("epoch", sa.func.clock_timestamp())


def read_control(conn: sa.Connection) -> Control:
    """The store's pause (not paused before the first pause)."""
    row = conn.execute(sa.select(schema.control).where(schema.control.c.id == 1)).first()
    if row is None:
        return Control()
    return Control(paused=row.paused, generation=row.generation, paused_since=row.paused_since,
                   paused_total_s=row.paused_total_s)


def set_pause(conn: sa.Connection, paused: bool, now: float) -> Control:
    """Pause (a new generation, unless already paused) or resume (the pause's seconds added to the total)."""
    table = schema.control
    insert = (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(table)
    conn.execute(insert.values(id=1, paused=False, generation=0, paused_total_s=0.0).on_conflict_do_nothing())
    if conn.dialect.name == "postgresql":  # a pause and a resume on two gateways at once: one after the other
        conn.execute(sa.select(table.c.id).where(table.c.id == 1).with_for_update())
    current = read_control(conn)
    if paused == current.paused:
        return current
    if paused:
        values = {"paused": True, "generation": current.generation + 1, "paused_since": now}
    else:
        held_s = max(0.0, now - current.paused_since) if current.paused_since else 0.0
        values = {"paused": False, "paused_since": None, "paused_total_s": current.paused_total_s + held_s}
    conn.execute(schema.control.update().where(schema.control.c.id == 1).values(**values))
    if conn.dialect.name == "postgresql":
        conn.execute(NOTIFY)  # delivered at commit
    return read_control(conn)


@dataclass(frozen=True)
class PeerRow:
    """A peer's heartbeat with the pause it applied (not part of the API's `GatewayPeer`)."""

    peer: GatewayPeer
    pause_generation: int


def read_peer_rows(conn: sa.Connection, stale_s: float) -> list[PeerRow]:
    """Every gateway row with its heartbeat's age by the database's clock."""
    g = schema.gateways.c
    age = (db_now() - g.beat_at).label("age_s")
    rows = conn.execute(sa.select(g.id, g.address, g.shared, g.paused, g.pause_generation, g.in_flight, g.held, age)
                        .order_by(g.started_at, g.id)).all()
    return [PeerRow(_peer(row, stale_s), row.pause_generation) for row in rows]


def _peer(row: Any, stale_s: float) -> GatewayPeer:
    age_s = max(0.0, float(row.age_s))
    return GatewayPeer(id=row.id, address=row.address, age_s=round(age_s, 3), live=age_s < stale_s,
                       shared=row.shared, paused=row.paused, in_flight=row.in_flight, held=row.held)


def join(conn: sa.Connection, row: dict[str, Any], stale_s: float) -> tuple[Control, list[PeerRow]]:
    """Register this gateway (under the join lock: two gateways starting at once see each other) and return the
    pause and the other gateways; rows long stale (killed gateways) are forgotten."""
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": JOIN_LOCK})
    g = schema.gateways.c
    conn.execute(schema.gateways.delete().where(g.beat_at < db_now() - stale_s * FORGET_AFTER_STALE))
    others = read_peer_rows(conn, stale_s)
    live_others = any(p.peer.live for p in others)
    conn.execute(schema.gateways.insert().values(**{**row, "shared": live_others}, beat_at=db_now()))
    conn.execute(NOTIFY)  # the others switch to numbering in the store now, not at their next beat
    return read_control(conn), others


def beat(conn: sa.Connection, row: dict[str, Any], *, notify: bool = False) -> None:
    """This gateway's heartbeat (its row again if it was forgotten meanwhile); with `notify`, the others are woken (a
    pause waiting for this gateway's drain reads it at once)."""
    g = schema.gateways.c
    values = {key: value for key, value in row.items() if key not in ("id", "address", "started_at")}
    if not conn.execute(schema.gateways.update().where(g.id == row["id"]).values(**values, beat_at=db_now())).rowcount:
        conn.execute(schema.gateways.insert().values(**row, beat_at=db_now()))
    if notify:
        conn.execute(NOTIFY)


def leave(conn: sa.Connection, gateway_id: str) -> None:
    conn.execute(schema.gateways.delete().where(schema.gateways.c.id == gateway_id))


def sqlite_lock(url: str) -> int | None:
    """An exclusive lock on `<database>.gateway-lock` for this process (its file descriptor), or SystemExit naming
    the fix when another gateway process holds it; None for an in-memory database."""
    database = sa.engine.make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    path = os.path.abspath(os.path.expanduser(database)) + ".gateway-lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise SystemExit(f"another gateway ({holder}) already serves the SQLite store {database}: a SQLite store "
                         "serves one gateway (one writer; it numbers calls and caches rollouts in memory). Stop that "
                         "gateway, or run every gateway on one PostgreSQL database (db_url: postgresql://...)"
                         ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
    return fd


class Fleet:
    """This gateway among the store's gateways: its heartbeat, the store's pause applied to its gate, and the switch
    to numbering calls in the store once it is not alone."""

    def __init__(self, config: GatewayConfig, store: SqlStore, gate: PauseGate, router: Router) -> None:
        if config.fleet_stale_s < 3 * config.fleet_poll_s:
            raise ValueError(f"fleet_stale_s ({config.fleet_stale_s:g}) must be at least 3 x fleet_poll_s "
                             f"({config.fleet_poll_s:g}): a live gateway would be counted gone between two beats")
        self.config = config
        self.store = store
        self.gate = gate
        self.router = router
        self.id = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.several = store.dialect == "postgresql"  # only a PostgreSQL store may have other gateways
        self.control = Control()
        self.peers: list[PeerRow] = []  # the other gateways at the last beat
        self._generation = 0  # the pause generation applied to the gate
        self._models: list[tuple] | None = None  # the models table as last read
        self._wake = asyncio.Event()  # beat now
        self._notified = asyncio.Event()  # a notification came (a pause waiting for the others' drain reads again)
        self._published: tuple | None = None  # what the last heartbeat said of the pause, the drain and numbering
        self._task: asyncio.Task | None = None
        self._listener: asyncio.Task | None = None
        self._lock_fd: int | None = None
        self._started_at = time.time()
        self._failing = False  # the last heartbeat failed (logged once per failing streak)

    # -- life -----------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Join the store's gateways (PostgreSQL) or lock the SQLite store, and apply the store's pause."""
        if not self.several:
            if self.store.dialect == "sqlite":
                self._lock_fd = sqlite_lock(self.store.url)
            self._apply(await self.store.fleet_read(read_control))
            return
        stale_s = self.config.fleet_stale_s
        started = time.monotonic()
        control, others = await self.store.fleet_write(lambda conn: join(conn, self._row(), stale_s))
        self.peers = others
        if any(p.peer.live for p in others):
            self._log_sharing()
            await self.store.share_numbering()
        self._apply(control)
        self.gate.on_drained = self._wake.set
        await self._beat()
        if self.store.shared and not await self._wait_until_all_share():
            raise SystemExit(f"gateways {self._behind()} still number calls in memory: they run a gateway without "
                             "several-gateway support, or cannot reach the store; stop or upgrade them")
        self.store.numbers_until = started + FENCE_SHARE * stale_s
        self._task = asyncio.create_task(self._run(), name="harnessrl-fleet")
        self._listener = asyncio.create_task(self._listen(), name="harnessrl-fleet-listen")

    async def stop(self) -> None:
        """Stop heartbeating and leave (the others stop counting this gateway at once)."""
        if self._task is not None:
            for task in (self._task, self._listener):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            with contextlib.suppress(Exception):
                await self.store.fleet_write(lambda conn: leave(conn, self.id))
            await self.store.close_numbering()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    async def _wait_until_all_share(self) -> bool:
        """Wait until every live gateway numbers calls in the store (they switch at their next beat); False if one
        still does not after JOIN_TIMEOUT_BEATS of their beats."""
        deadline = time.monotonic() + JOIN_TIMEOUT_BEATS * self.config.fleet_poll_s + self.config.fleet_stale_s
        stale_s = self.config.fleet_stale_s
        while True:
            rows = await self.store.fleet_read(lambda conn: read_peer_rows(conn, stale_s))
            self.peers = [p for p in rows if p.peer.id != self.id]
            if not self._behind():
                return True
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(DRAIN_POLL_S)

    def _log_sharing(self) -> None:
        others = ", ".join(f"{p.peer.id} ({p.peer.address})" for p in self.peers if p.peer.live)
        log.warning("gateway %s shares its store with %s: calls are numbered in the store from now on", self.id,
                    others)

    def _behind(self) -> str:
        """The live gateways that number calls in memory (named), or ''."""
        return ", ".join(f"{p.peer.id} ({p.peer.address})" for p in self.peers if p.peer.live and not p.peer.shared)

    def _row(self) -> dict[str, Any]:
        return {"id": self.id, "address": self.config.base_url(), "started_at": self._started_at,
                "shared": self.store.shared, "paused": self.gate.paused, "pause_generation": self._generation,
                "in_flight": self.gate.in_flight, "held": self.gate.held}

    async def _beat(self) -> None:
        row = self._row()
        notify = self._changed(row)
        await self.store.fleet_write(lambda conn: beat(conn, row, notify=notify))

    def _changed(self, row: dict[str, Any]) -> bool:
        """Whether `row` says something new a pause or a joining gateway waits for (then it is published)."""
        published = (row["shared"], row["paused"], row["pause_generation"], row["paused"] and row["in_flight"] == 0)
        changed, self._published = published != self._published, published
        return changed

    async def notify(self) -> None:
        """Wake every gateway of the store now (a model changed here): they read the store at once."""
        if self.several:
            await self.store.fleet_write(lambda conn: conn.execute(NOTIFY))

    async def _listen(self) -> None:
        """LISTEN on the store's channel on a connection of its own; each notification wakes this gateway (and a pause
        waiting here). Reconnects after a failure; the beat every fleet_poll_s covers what a lost one missed."""
        import psycopg

        from gateway.numbering import conninfo

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(conninfo(self.store.url), autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self._wake.set()  # whatever was sent before the LISTEN
                    async for _ in conn.notifies():
                        self._wake.set()
                        self._notified.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the beats go on meanwhile
                log.debug("gateway notification listener: %s", exc)
            await asyncio.sleep(self.config.fleet_poll_s)

    async def _run(self) -> None:
        """Every fleet_poll_s, or at once when woken (a drain finished, a pause applied): read the pause, the models
        and the others; switch to shared numbering when not alone; apply; heartbeat."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.config.fleet_poll_s)
            self._wake.clear()
            try:
                await self._sync()
                if self._failing:
                    log.warning("gateway heartbeat to the store gets through again")
                self._failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the store unreachable: the next beat tries again
                if not self._failing:
                    log.warning("gateway heartbeat to the store failed (%s); past %.1f s without one this gateway "
                                "numbers no call (503) until one gets through", exc,
                                FENCE_SHARE * self.config.fleet_stale_s)
                self._failing = True

    async def _sync(self) -> None:
        """One transaction: this gateway's heartbeat (its state as of now), then the store's pause, the gateways and
        the models, applied after it; a change this makes to what the heartbeat says (a pause applied, numbering
        shared) is published by the next beat, at once."""
        stale_s = self.config.fleet_stale_s
        started = time.monotonic()
        late = started > self.store.numbers_until  # another gateway may have counted this one gone meanwhile
        row = self._row()
        notify = self._changed(row)
        m = schema.models.c

        def sync(conn: sa.Connection) -> tuple[Control, list[PeerRow], list[tuple]]:
            beat(conn, row, notify=notify)
            models = conn.execute(sa.select(m.name, m.base_url, m.version, m.served_name)
                                  .order_by(m.name, m.base_url)).all()
            return read_control(conn), read_peer_rows(conn, stale_s), [tuple(r) for r in models]

        control, peers, models = await self.store.fleet_write(sync)
        self.peers = [p for p in peers if p.peer.id != self.id]
        if not self.store.shared and any(p.peer.live for p in self.peers):
            self._log_sharing()
            await self.store.share_numbering()
            self._wake.set()
        if models != self._models:
            self._models = models
            self.router.load([ModelRecord(name=name, base_url=base_url, version=version, served_name=served_name)
                              for name, base_url, version, served_name in models])
        self._apply(control)
        if late and self.store.shared and not await self._wait_until_all_share():
            return  # numbers nothing until every live gateway numbers in the store
        self.store.numbers_until = started + FENCE_SHARE * stale_s

    def _apply(self, control: Control) -> None:
        """Hold or release this gateway's new calls as the store's pause says."""
        self.control = control
        if control.paused and (not self.gate.paused or self._generation != control.generation):
            self.gate.hold()
            self._generation = control.generation
            self._wake.set()  # acknowledge it at once
        elif not control.paused and self.gate.paused:
            self.gate.release()
            self._wake.set()

    # -- admin ----------------------------------------------------------------------------------------------

    async def pause(self, drain_timeout_s: float) -> PauseResult:
        """Hold new calls on every gateway; return once none has a call in flight (or the timeout passed)."""
        started = time.monotonic()
        now = time.time()
        control = await self.store.fleet_write(lambda conn: set_pause(conn, True, now))
        self._apply(control)
        if not self.several:
            drained = await self.gate.wait_idle(drain_timeout_s)
            return self._result(started, drained, [])
        deadline = started + drain_timeout_s
        stale_s = self.config.fleet_stale_s
        while True:
            self._notified.clear()  # before the read: a notification during it is not lost
            current, peers = await self.store.fleet_read(lambda conn: (read_control(conn),
                                                                        read_peer_rows(conn, stale_s)))
            others = [p for p in peers if p.peer.id != self.id and p.peer.live]
            if not current.paused or current.generation != control.generation:  # resumed (or paused anew) meanwhile
                self._apply(current)
                return self._result(started, False, others)
            waiting = [p for p in others if not (p.peer.paused and p.pause_generation == control.generation
                                                 and p.peer.in_flight == 0)]
            if self.gate.in_flight == 0 and not waiting:
                return self._result(started, True, others)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self._result(started, False, others)
            if waiting:  # their heartbeat notifies once they applied the pause and drained
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._notified.wait(), timeout=min(DRAIN_READ_S, remaining))
            else:
                await self.gate.wait_idle(min(DRAIN_READ_S, remaining))

    async def resume(self) -> PauseResult:
        """Release held calls here at once, on the other gateways as soon as the notification reaches them (at their
        next beat at the latest)."""
        now = time.time()
        self._apply(await self.store.fleet_write(lambda conn: set_pause(conn, False, now)))
        return self._result(time.monotonic(), self.gate.in_flight == 0, [p for p in self.peers if p.peer.live])

    def _result(self, started: float, drained: bool, others: list[PeerRow]) -> PauseResult:
        return PauseResult(paused=self.gate.paused,
                           in_flight=self.gate.in_flight + sum(p.peer.in_flight for p in others),
                           held=self.gate.held + sum(p.peer.held for p in others), drained=drained,
                           waited_ms=(time.monotonic() - started) * 1000, gateways=1 + len(others))

    async def state(self) -> tuple[Control, list[GatewayPeer]]:
        """The store's pause and every gateway (this one with its counters as of now)."""
        if not self.several:
            control = await self.store.fleet_read(read_control)
            return control, [self._own_peer(0.0)]
        stale_s = self.config.fleet_stale_s
        control, rows = await self.store.fleet_read(lambda conn: (read_control(conn), read_peer_rows(conn, stale_s)))
        return control, [self._own_peer(r.peer.age_s) if r.peer.id == self.id else r.peer for r in rows]

    def _own_peer(self, age_s: float) -> GatewayPeer:
        return GatewayPeer(id=self.id, address=self.config.base_url(), age_s=age_s, live=True,
                           shared=self.store.shared, paused=self.gate.paused, in_flight=self.gate.in_flight,
                           held=self.gate.held)
