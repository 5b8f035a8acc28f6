"""Group commit: every op in one batch runs in its own savepoint; a failing op fails alone."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest
import sqlalchemy as sa

from gateway.committer import GroupCommitter
from gateway.sql import make_engine

metadata = sa.MetaData()
items = sa.Table("items", metadata, sa.Column("id", sa.Integer, primary_key=True), sa.Column("v", sa.String(20)))


@pytest.fixture
def engine(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'c.db'}")
    metadata.create_all(engine)
    yield engine
    engine.dispose()


def stored(engine: sa.Engine) -> dict[int, str]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.select(items.c.id, items.c.v)).all())


def blocked_batch(committer: GroupCommitter) -> tuple[threading.Event, Future]:
    """Occupy the writer so everything submitted next lands in one batch."""
    entered, release = threading.Event(), threading.Event()

    def hold(conn: sa.Connection) -> str:
        entered.set()
        release.wait(10)
        return "held"

    future = committer.submit(hold)
    assert entered.wait(10)
    return release, future


def insert_then_fail(conn: sa.Connection) -> None:
    conn.execute(items.insert().values(id=50, v="half-written"))
    raise ValueError("op failed after writing")


def test_a_failing_op_fails_alone_and_its_writes_are_rolled_back(engine) -> None:
    committer = GroupCommitter(engine)
    release, held = blocked_batch(committer)
    before = committer.submit(lambda conn: conn.execute(items.insert().values(id=1, v="a")).rowcount)
    failing = committer.submit(insert_then_fail)
    after = committer.submit(lambda conn: conn.execute(items.insert().values(id=2, v="b")).rowcount)
    release.set()
    assert (held.result(10), before.result(10), after.result(10)) == ("held", 1, 1)
    with pytest.raises(ValueError, match="after writing"):
        failing.result(10)
    committer.close()
    assert stored(engine) == {1: "a", 2: "b"}


def test_a_bad_row_in_a_batched_insert_run_fails_alone(engine) -> None:
    committer = GroupCommitter(engine)
    committer.insert(items, {"id": 7, "v": "first"}).result(10)
    release, _ = blocked_batch(committer)
    futures = [committer.insert(items, {"id": i, "v": f"r{i}"}) for i in (10, 7, 11)]
    release.set()
    assert futures[0].result(10) is None and futures[2].result(10) is None
    with pytest.raises(sa.exc.IntegrityError):
        futures[1].result(10)
    committer.close()
    assert stored(engine) == {7: "first", 10: "r10", 11: "r11"}


def test_results_are_visible_to_other_connections_once_resolved(engine) -> None:
    committer = GroupCommitter(engine)
    futures = [committer.insert(items, {"id": i, "v": "x"}) for i in range(200)]
    for i in (0, 99, 199):
        futures[i].result(10)
        assert i in stored(engine)
    committer.close()


def test_close_commits_what_is_pending(engine) -> None:
    committer = GroupCommitter(engine)
    release, _ = blocked_batch(committer)
    pending = committer.insert(items, {"id": 3, "v": "late"})
    release.set()
    committer.close()
    assert pending.done()
    assert stored(engine) == {3: "late"}


def test_the_sqlite_fast_path_commits_all_or_nothing_and_raises_as_sqlalchemy_would(engine) -> None:
    from gateway.committer import is_busy
    from gateway.sql import insert_rows_sqlite

    with engine.connect() as conn:
        insert_rows_sqlite(conn, [(items, [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]), (items, [{"id": 3, "v": "c"}])])
        with pytest.raises(sa.exc.IntegrityError) as refused:
            insert_rows_sqlite(conn, [(items, [{"id": 4, "v": "d"}]), (items, [{"id": 1, "v": "again"}])])
        assert "UNIQUE" in str(refused.value.orig) and not conn.connection.driver_connection.in_transaction
        with engine.connect() as other:  # another writer holds the lock
            other.connection.driver_connection.execute("BEGIN IMMEDIATE")
            conn.connection.driver_connection.execute("PRAGMA busy_timeout=0")
            with pytest.raises(sa.exc.OperationalError) as locked:
                insert_rows_sqlite(conn, [(items, [{"id": 5, "v": "e"}])])
            assert is_busy(locked.value)
            other.connection.driver_connection.execute("ROLLBACK")
        insert_rows_sqlite(conn, [(items, [{"id": 5, "v": "e"}])])  # the connection is usable again
    assert stored(engine) == {1: "a", 2: "b", 3: "c", 5: "e"}


def test_the_sqlite_fast_path_never_touches_a_transaction_it_did_not_open(engine) -> None:
    from gateway.sql import insert_rows_sqlite

    with engine.connect() as conn:
        conn.execute(items.insert().values(id=1, v="theirs"))  # SQLAlchemy's transaction, open
        with pytest.raises(RuntimeError, match="no transaction open"):
            insert_rows_sqlite(conn, [(items, [{"id": 2, "v": "mine"}])])
        assert conn.in_transaction() and conn.connection.driver_connection.in_transaction
        conn.commit()
    assert stored(engine) == {1: "theirs"}
