"""SQLAlchemy engine set-up: SQLite in WAL mode with explicit transactions, or any other SQLAlchemy URL; plain row
inserts sent to the driver with a statement compiled once (`insert_rows`)."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any

import sqlalchemy as sa

SYNCHRONOUS_LEVELS = ("OFF", "NORMAL", "FULL", "EXTRA")
LOCK_TIMEOUT_S = 30.0
"""Longest a statement waits for a lock another connection holds before it fails (SQLite's busy timeout,
PostgreSQL's lock_timeout)."""
WAL_SIZE_LIMIT_BYTES = 64 * 1024 * 1024
"""The write-ahead log file is cut back to this size when it restarts (`gateway.wal_checkpoint`)."""
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
"""PostgreSQL URLs without a driver; SQLAlchemy would pick psycopg2, which the project does not install."""


def with_default_driver(url: str) -> str:
    """`url` with psycopg 3 as the driver of a PostgreSQL URL that names none (the driver the gateway image ships)."""
    for scheme in POSTGRES_SCHEMES:
        if url.startswith(scheme):
            return "postgresql+psycopg://" + url.removeprefix(scheme)
    return url


def make_engine(url: str, *, sqlite_synchronous: str = "NORMAL", lock_timeout_s: float = LOCK_TIMEOUT_S,
                commits_checkpoint: bool = True) -> sa.Engine:
    """An engine for `url`; for SQLite: WAL journal, busy timeout, and BEGIN emitted by SQLAlchemy (savepoints work);
    for PostgreSQL: psycopg 3 unless the URL names a driver, and a lock timeout.

    `sqlite_synchronous=NORMAL` makes every commit survive a killed process (kill -9); FULL also survives power loss.
    A statement that waits `lock_timeout_s` for another connection's lock fails (instead of hanging the writer).
    `commits_checkpoint=False`: no commit checkpoints the write-ahead log; the caller runs a
    `gateway.wal_checkpoint.WalCheckpointer` (the log grows until something does).
    """
    lock_timeout_ms = int(lock_timeout_s * 1000)
    if not url.startswith("sqlite"):
        url = with_default_driver(url)
        connect_args = {"options": f"-c lock_timeout={lock_timeout_ms}"} if url.startswith("postgresql") else {}
        return sa.create_engine(url, pool_pre_ping=True, connect_args=connect_args)
    level = sqlite_synchronous.upper()
    if level not in SYNCHRONOUS_LEVELS:
        raise ValueError(f"sqlite_synchronous={sqlite_synchronous!r}; use one of {', '.join(SYNCHRONOUS_LEVELS)}")
    database = sa.engine.make_url(url).database
    if database and database != ":memory:":
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(url, connect_args={"check_same_thread": False, "timeout": lock_timeout_s})

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None  # let SQLAlchemy emit BEGIN itself
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={level}")
        cursor.execute(f"PRAGMA busy_timeout={lock_timeout_ms}")
        if not commits_checkpoint:
            cursor.execute("PRAGMA wal_autocheckpoint=0")
        cursor.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT_BYTES}")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.info.get("writer") else "BEGIN")

    return engine


@functools.lru_cache(maxsize=64)
def _insert_statement(dialect: sa.Dialect, table: sa.Table, keys: tuple[str, ...]) -> tuple[str, Any]:
    """(the INSERT of `keys` into `table` in `dialect`'s SQL and parameter style, what turns a row into its
    parameters: a getter of the values in the statement's order for positional styles, None for named ones)."""
    compiled = table.insert().compile(dialect=dialect, column_keys=list(keys))
    if not compiled.positional:
        return compiled.string, None
    order = tuple(compiled.positiontup)
    if set(order) != set(keys):
        raise ValueError(f"the INSERT into {table.name} binds {order}, not the row's keys {keys}")
    return compiled.string, itemgetter(*order) if len(order) > 1 else (lambda row: (row[order[0]],))


def _insert_parameters(dialect: sa.Dialect, table: sa.Table, rows: Sequence[dict[str, Any]]) -> tuple[str, list]:
    """The INSERT of `rows` into `table` (`_insert_statement`) and its executemany parameters."""
    sql, parameters = _insert_statement(dialect, table, tuple(rows[0]))
    return sql, list(rows) if parameters is None else [parameters(row) for row in rows]


def insert_rows_sqlite(conn: sa.Connection, groups: Sequence[tuple[sa.Table, Sequence[dict[str, Any]]]]) -> None:
    """Insert each group's rows (`insert_rows`' rules) into its table in ONE transaction of SQLite's driver connection
    behind `conn`, which must have none open: BEGIN IMMEDIATE, one executemany a group, COMMIT, with none of
    SQLAlchemy's statement, event or transaction machinery (about half the cost of a one-row commit). Any error
    rolls the whole transaction back and is raised as SQLAlchemy would raise it (`sa.exc.OperationalError` for a
    locked database, `sa.exc.IntegrityError` for a refused row, the driver's error as `orig`)."""
    driver, statement = conn.connection.driver_connection, "BEGIN IMMEDIATE"
    if conn.in_transaction() or driver.in_transaction:
        raise RuntimeError("insert_rows_sqlite needs a connection with no transaction open")
    try:
        driver.execute(statement)
        for table, rows in groups:
            statement, parameters = _insert_parameters(conn.dialect, table, rows)
            driver.executemany(statement, parameters)
        statement = "COMMIT"
        driver.execute(statement)
    except BaseException as exc:
        if driver.in_transaction:  # ours: none was open before the BEGIN
            driver.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise sa.exc.DBAPIError.instance(statement, None, exc, sqlite3.Error) from exc
        raise


def insert_rows(conn: sa.Connection, table: sa.Table, rows: Sequence[dict[str, Any]]) -> None:
    """Insert `rows` (dicts with the same keys, values the driver takes as they are: str, int, float, bool, bytes,
    None) into `table` in the connection's transaction: one executemany of a statement compiled once per table and
    keys, without SQLAlchemy's per-row parameter processing (the hot path's call rows)."""
    conn.exec_driver_sql(*_insert_parameters(conn.dialect, table, rows))
