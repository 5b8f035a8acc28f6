"""SQLAlchemy engine set-up: SQLite in WAL mode with explicit transactions, or any other SQLAlchemy URL."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

SYNCHRONOUS_LEVELS = ("OFF", "NORMAL", "FULL", "EXTRA")


def make_engine(url: str, *, sqlite_synchronous: str = "NORMAL") -> sa.Engine:
    """An engine for `url`; for SQLite: WAL journal, busy timeout, and BEGIN emitted by SQLAlchemy (savepoints work).

    `sqlite_synchronous=NORMAL` makes every commit survive a killed process (kill -9); FULL also survives power loss.
    """
    if not url.startswith("sqlite"):
        return sa.create_engine(url, pool_pre_ping=True)
    level = sqlite_synchronous.upper()
    if level not in SYNCHRONOUS_LEVELS:
        raise ValueError(f"sqlite_synchronous={sqlite_synchronous!r}; use one of {', '.join(SYNCHRONOUS_LEVELS)}")
    database = sa.engine.make_url(url).database
    if database and database != ":memory:":
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None  # let SQLAlchemy emit BEGIN itself
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={level}")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.info.get("writer") else "BEGIN")

    return engine
