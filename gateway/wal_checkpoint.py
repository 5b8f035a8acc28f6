"""SQLite's WAL checkpoints, off the commit path.

By default SQLite checkpoints inside the commit that grows the write-ahead log past 1,000 pages: that commit copies
the log into the database file and syncs it, a few to tens of milliseconds every few hundred calls, on the event
loop (the in-loop committer) or the writer thread, while every call waits behind it. The store turns that off on its
connections (`sql.make_engine`: `wal_autocheckpoint=0`) and checkpoints here instead: a thread of its own, every
`interval_s`, a PASSIVE checkpoint (it copies what no reader still needs and never waits for a reader or a writer),
and a TRUNCATE one when the store closes (the log emptied, the database file whole).

SQLite runs a checkpoint with the GIL released, so the loop goes on answering calls while the thread copies and
syncs. The log is restarted by the first commit after a complete checkpoint and cut back to `journal_size_limit`
(`sql.WAL_SIZE_LIMIT_BYTES`); a reader that holds an old snapshot for long keeps it growing, as it would anyway.
"""

from __future__ import annotations

import logging
import sqlite3
import threading

import sqlalchemy as sa

log = logging.getLogger("harnessrl.gateway")

CHECKPOINT_INTERVAL_S = 1.0
"""How often the background thread copies the write-ahead log into the database file."""


class WalCheckpointer:
    """Checkpoints an SQLite database in WAL mode from a daemon thread, on a connection of its own."""

    def __init__(self, engine: sa.Engine, interval_s: float = CHECKPOINT_INTERVAL_S) -> None:
        self._engine = engine
        self._interval_s = interval_s
        self._stop = threading.Event()
        self.checkpoints = 0  # PASSIVE checkpoints run (each may copy nothing)
        self.last: tuple[int, int, int] | None = None  # the last one's (busy, frames in the log, frames copied)
        self._thread = threading.Thread(target=self._run, name="harnessrl-wal-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.checkpoint("PASSIVE")

    def checkpoint(self, mode: str) -> tuple[int, int, int] | None:
        """One checkpoint (`PASSIVE` or `TRUNCATE`): SQLite's (busy, frames in the log, frames copied); None when it
        failed (logged: the next one tries again; the log only grows meanwhile)."""
        try:
            with self._engine.connect() as conn:  # on the driver's connection: no BEGIN around the checkpoint
                row = conn.connection.driver_connection.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
        except (sa.exc.SQLAlchemyError, sqlite3.Error) as exc:
            log.warning("WAL checkpoint (%s) failed, to be tried again: %s", mode, exc)
            return None
        self.last = (row[0], row[1], row[2])
        self.checkpoints += mode == "PASSIVE"
        return self.last

    def close(self) -> None:
        """Stop the thread, then empty the log into the database file (writes must have ended)."""
        self._stop.set()
        self._thread.join(timeout=30)
        self.checkpoint("TRUNCATE")
