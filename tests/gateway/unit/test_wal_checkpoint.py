"""WAL checkpoints off the commit path (`gateway.wal_checkpoint`): the store's commits never copy the log into the
database file; the background thread does, and closing the store empties the log."""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

import sqlalchemy as sa

from gateway.sql import make_engine
from gateway.store import SqlStore
from gateway.wal_checkpoint import WalCheckpointer

ROW_BYTES = 12_000  # about a recorded call
ROWS = 600  # about 1,800 pages of log: past SQLite's default autocheckpoint of 1,000 pages


def write_rows(engine: sa.Engine, rows: int = ROWS) -> None:
    """`rows` commits of one row each, as the call recorder makes them."""
    with engine.connect() as conn:
        conn.info["writer"] = True
        with conn.begin():
            conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, body BLOB)")
        for _ in range(rows):
            with conn.begin():
                conn.exec_driver_sql("INSERT INTO t (body) VALUES (?)", (os.urandom(ROW_BYTES),))


def size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def wait_for(predicate, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_commits_checkpoint_by_default_and_not_when_told(tmp_path) -> None:
    for commits_checkpoint, copied in ((True, True), (False, False)):
        db = tmp_path / f"{commits_checkpoint}.db"
        engine = make_engine(f"sqlite:///{db}", commits_checkpoint=commits_checkpoint)
        write_rows(engine)
        assert (size(db) > ROWS * ROW_BYTES // 2) is copied, (commits_checkpoint, size(db))
        if not copied:
            assert size(Path(f"{db}-wal")) > ROWS * ROW_BYTES
        engine.dispose()


def test_the_thread_copies_the_log_and_closing_empties_it(tmp_path) -> None:
    db, wal = tmp_path / "s.db", tmp_path / "s.db-wal"
    engine = make_engine(f"sqlite:///{db}", commits_checkpoint=False)
    checkpointer = WalCheckpointer(db, interval_s=0.05)
    write_rows(engine)
    assert wait_for(lambda: size(db) > ROWS * ROW_BYTES), size(db)
    assert checkpointer.checkpoints >= 1
    checkpointer.close()
    assert size(wal) == 0 and size(db) > ROWS * ROW_BYTES
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM t").scalar() == ROWS
    engine.dispose()


def test_under_writes_that_never_pause_the_log_still_starts_over_so_it_stays_bounded(tmp_path) -> None:
    """A PASSIVE checkpoint is never complete when the next write begins if the writes go on, so the log would never
    start over: the RESTART past `restart_frames` bounds it. Measured as the log file's largest size while 40 MiB are
    written in commits of one call row each."""
    db, wal = tmp_path / "b.db", tmp_path / "b.db-wal"
    engine = make_engine(f"sqlite:///{db}", commits_checkpoint=False)
    write_rows(engine, 1)
    restart_frames = 256  # 1 MiB of 4 KiB pages
    checkpointer = WalCheckpointer(db, interval_s=0.02, restart_frames=restart_frames)
    largest, written = 0, 0
    with engine.connect() as conn:
        conn.info["writer"] = True
        while checkpointer.restarts < 3 or written < 40 * 2**20:
            with conn.begin():
                conn.exec_driver_sql("INSERT INTO t (body) VALUES (?)", (os.urandom(ROW_BYTES),))
            written += ROW_BYTES
            largest = max(largest, size(wal))
            time.sleep(0.0005)  # a gateway's writes leave gaps (the loop's other work); a tight loop leaves none
            assert written < 2**28, "the log never started over"
    checkpointer.close()
    assert largest < written / 4, (largest, written, checkpointer.restarts)
    engine.dispose()


def test_a_failed_checkpoint_is_logged_and_the_thread_goes_on(tmp_path, caplog) -> None:
    folder = tmp_path / "gone"
    engine = make_engine(f"sqlite:///{folder / 'x.db'}", commits_checkpoint=False)
    write_rows(engine, 1)
    engine.dispose()
    shutil.rmtree(folder)  # nothing to open (and nothing created): every checkpoint fails
    checkpointer = WalCheckpointer(folder / "x.db", interval_s=0.02)
    with caplog.at_level(logging.WARNING, logger="harnessrl.gateway"):
        assert checkpointer.checkpoint("PASSIVE") is None
        assert wait_for(lambda: sum("WAL checkpoint (PASSIVE) of" in r.message for r in caplog.records) >= 2)
    assert checkpointer._thread.is_alive() and not folder.exists()
    checkpointer.close()


def test_the_store_on_a_file_checkpoints_aside_and_closes_with_an_empty_log(tmp_path) -> None:
    db = tmp_path / "store.db"
    store = SqlStore(f"sqlite:///{db}")
    with store._engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 0
    assert store._checkpointer is not None
    store.close()
    assert size(Path(f"{db}-wal")) == 0


def test_a_store_in_memory_or_on_postgres_has_no_checkpointer() -> None:
    store = SqlStore("sqlite://")
    assert store._checkpointer is None
    store.close()
