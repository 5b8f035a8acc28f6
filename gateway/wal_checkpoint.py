"""SQLite's WAL checkpoints, off the commit path.

By default SQLite checkpoints inside the commit that grows the write-ahead log past 1,000 pages: that commit copies
the log into the database file and syncs it, a few to tens of milliseconds every few hundred calls, on the event
loop (the in-loop committer) or the writer thread, while every call waits behind it. The store turns that off on its
connections (`sql.make_engine(commits_checkpoint=False)`) and checkpoints here instead, from a thread with a
connection of its own:

- every `interval_s` a PASSIVE checkpoint: it copies what no reader still needs and never waits for anyone;
- when the log then holds more than `restart_frames` frames, a RESTART one: under steady writes a PASSIVE checkpoint
  is never complete at the moment a write begins, so the log would never start over and would grow for as long as
  the calls keep coming. RESTART copies the few frames written since the PASSIVE one and waits (at most
  `BUSY_TIMEOUT_S`) until the next writer can start the log from its beginning; writers wait for it meanwhile (the
  in-loop committer hands its batch to its writer thread rather than wait);
- when the store closes, a TRUNCATE one: the log emptied, the database file whole.

SQLite runs a checkpoint with the GIL released, so the event loop goes on answering calls while the thread copies
and syncs. A log that starts over is cut back to `journal_size_limit` (`sql.WAL_SIZE_LIMIT_BYTES`).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

log = logging.getLogger("harnessrl.gateway")

CHECKPOINT_INTERVAL_S = 1.0
"""How often the background thread copies the write-ahead log into the database file."""
RESTART_FRAMES = 4096
"""A log of more frames than this (16 MiB of 4 KiB pages) is restarted after its PASSIVE checkpoint."""
BUSY_TIMEOUT_S = 1.0
"""Longest a RESTART or TRUNCATE checkpoint waits for the writer and old readers before it gives up until the next
time."""


class WalCheckpointer:
    """Checkpoints the SQLite database at `path` (in WAL mode) from a daemon thread, on a connection of its own
    (opened read-write, never creating the file)."""

    def __init__(self, path: str | Path, interval_s: float = CHECKPOINT_INTERVAL_S,
                 restart_frames: int = RESTART_FRAMES) -> None:
        self._path = str(path)
        self._interval_s = interval_s
        self._restart_frames = restart_frames
        self._conn: sqlite3.Connection | None = None
        self._stop = threading.Event()
        self.checkpoints = 0  # PASSIVE checkpoints run (each may copy nothing)
        self.restarts = 0  # RESTART checkpoints that completed
        self.last: tuple[int, int, int] | None = None  # the last one's (busy, frames in the log, frames copied)
        self._thread = threading.Thread(target=self._run, name="harnessrl-wal-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            passive = self.checkpoint("PASSIVE")
            if passive is not None and passive[1] > self._restart_frames:
                restarted = self.checkpoint("RESTART")
                self.restarts += restarted is not None and restarted[0] == 0

    def checkpoint(self, mode: str) -> tuple[int, int, int] | None:
        """One checkpoint (`PASSIVE`, `RESTART` or `TRUNCATE`): SQLite's (busy, frames in the log, frames copied);
        None when it failed (logged: the next one tries again; the log only grows meanwhile)."""
        try:
            if self._conn is None:
                self._conn = sqlite3.connect(f"{Path(self._path).resolve().as_uri()}?mode=rw", uri=True,
                                             timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
            row = self._conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
        except sqlite3.Error as exc:
            log.warning("WAL checkpoint (%s) of %s failed, to be tried again: %s", mode, self._path, exc)
            self._drop_connection()
            return None
        self.last = (row[0], row[1], row[2])
        self.checkpoints += mode == "PASSIVE"
        return self.last

    def _drop_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        """Stop the thread, then empty the log into the database file (writes must have ended)."""
        self._stop.set()
        self._thread.join(timeout=30)
        self.checkpoint("TRUNCATE")
        self._drop_connection()
