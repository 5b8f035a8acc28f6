"""SQL tables of the store (SQLAlchemy Core): rollouts, calls, events, models, meta, artifacts, and the gateways
sharing the store with their pause (gateways, control).

Tables are created when missing (`create_tables`); a column added to an existing table since the first release is in
`ADDED_COLUMNS` and is added to an older database by `ALTER TABLE ... ADD COLUMN` (nullable, or with a default), and
an index added since is in `ADDED_INDEXES` (`CREATE INDEX IF NOT EXISTS`), so a store written by an older gateway
opens with its rows intact.
"""

from __future__ import annotations

import sqlalchemy as sa

from gateway import call_fence

metadata = sa.MetaData()

meta = sa.Table(
    "meta", metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.LargeBinary, nullable=False),
)

rollouts = sa.Table(
    "rollouts", metadata,
    sa.Column("id", sa.String(200), primary_key=True),
    sa.Column("group_id", sa.String(200), nullable=False, index=True),
    sa.Column("input", sa.LargeBinary, nullable=False),
    sa.Column("mode", sa.String(8), nullable=False),
    sa.Column("state", sa.String(16), nullable=False, index=True),
    sa.Column("attempt", sa.Integer, nullable=False, default=0),
    sa.Column("max_attempts", sa.Integer, nullable=False),
    sa.Column("failure_kind", sa.String(8)),
    sa.Column("error", sa.Text),
    sa.Column("reward", sa.Float),
    sa.Column("lease_owner", sa.String(200)),
    sa.Column("lease_expires_at", sa.Float),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("started_at", sa.Float),
    sa.Column("finished_at", sa.Float),
    sa.Column("finished_seq", sa.Integer, unique=True),
    sa.Column("sampling_seed", sa.BigInteger),  # RolloutSpec.sampling_seed; NULL: unseeded, or an older gateway's
    sa.Column("next_seq", sa.Integer, nullable=False, server_default=sa.text("0")),  # the current attempt's next
    # call number while several gateways share the store (gateway.fleet); 0 after each claim. A gateway alone numbers
    # calls in memory and leaves it behind: a number taken in the store is never below max(calls.seq) + 1 either
    sa.Column("calls_closed_at", sa.Float),  # when the controller closed the current attempt's calls (its harness
    # ended: `LeaseRenewal.close_calls`); NULL while the attempt may still record calls, and after each claim
)

calls = sa.Table(
    "calls", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("rollout_id", sa.String(200), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("stream", sa.Boolean, nullable=False),
    sa.Column("model", sa.Text, nullable=False),  # as the harness sent it: unbounded, as on SQLite
    sa.Column("upstream", sa.String(500)),
    sa.Column("status", sa.String(8), nullable=False),
    sa.Column("http_status", sa.Integer, nullable=False),
    sa.Column("error", sa.Text),
    sa.Column("error_code", sa.String(40)),  # records.CallErrorCode; NULL: a clean answer, or an older gateway's call
    sa.Column("request", sa.LargeBinary, nullable=False),
    sa.Column("response_raw", sa.LargeBinary),
    sa.Column("response_id", sa.Text),  # from the upstream: unbounded
    sa.Column("prompt_token_ids", sa.LargeBinary, nullable=False),
    sa.Column("response_token_ids", sa.LargeBinary, nullable=False),
    sa.Column("response_logprobs", sa.LargeBinary, nullable=False),
    sa.Column("response_text", sa.Text),
    sa.Column("finish_reason", sa.Text),  # from the upstream: unbounded
    sa.Column("n_choices", sa.Integer, nullable=False),
    sa.Column("extra_choices", sa.LargeBinary),  # choices with index >= 1 (gateway.tokens.pack_choices); NULL: none
    sa.Column("side", sa.Boolean, nullable=False, server_default=sa.false()),  # a harness's side call
    sa.Column("sampling", sa.LargeBinary),  # SamplingRecord as JSON; NULL: nothing sampled, or an older gateway's call
    sa.Column("policy_version", sa.Integer),
    sa.Column("latency_ms", sa.Float, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("continuation", sa.LargeBinary),  # what a call continuing this answer starts from, as JSON (the
    # protocol's items of its chain's turns and its own: gateway.translated); NULL: an answer no call continues (a
    # protocol without continuations, a failed call), or one an older gateway recorded
    sa.Column("recorded_prefix", sa.Integer),  # prompt tokens from the attempt's records (gateway.recorded_turns)
)
UNIQUE_CALL_NUMBER = "ux_calls_attempt_seq"
UNIQUE_CALL_INDEX = sa.Index(UNIQUE_CALL_NUMBER, calls.c.rollout_id, calls.c.attempt, calls.c.seq, unique=True)
"""One row per call number of a rollout attempt: a second row with the same (rollout, attempt, seq) is refused. It
replaced the non-unique `OLD_CALL_INDEX` on the same columns (`unique_call_numbers` migrates an older store)."""
OLD_CALL_INDEX = "ix_calls_rollout"
KEEP_FIRST_CALL = "DELETE FROM calls WHERE id NOT IN (SELECT min(id) FROM calls GROUP BY rollout_id, attempt, seq)"
"""The fix named when an older store holds duplicate call numbers: each number's first row is kept."""

CONTINUED = sa.Index("ix_calls_continued", calls.c.rollout_id, calls.c.attempt, calls.c.response_id,
                     sqlite_where=calls.c.continuation.isnot(None), postgresql_where=calls.c.continuation.isnot(None))
"""The answers a later call may continue, by (rollout, attempt, response id); partial, so the other calls' inserts
do not maintain it."""
RECORD_COLUMNS = tuple(column for column in calls.c if column.name != "continuation")
"""The columns of a `CallRecord` (the continuation is read only by the call that continues the answer)."""

events = sa.Table(
    "events", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("rollout_id", sa.String(200), nullable=False, index=True),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("payload", sa.LargeBinary, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
)

models = sa.Table(
    "models", metadata,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("base_url", sa.String(500), primary_key=True),
    sa.Column("served_name", sa.String(200), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
)

artifacts = sa.Table(
    "artifacts", metadata,
    sa.Column("rollout_id", sa.String(200), primary_key=True),
    sa.Column("attempt", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("data", sa.LargeBinary, nullable=False),
    sa.Column("size_bytes", sa.Integer, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
)


gateways = sa.Table(
    "gateways", metadata,
    sa.Column("id", sa.String(200), primary_key=True),  # host-pid-random of one gateway process
    sa.Column("address", sa.Text, nullable=False),  # where it listens (host:port, its public URL): for operators
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("beat_at", sa.Float, nullable=False),  # the database's clock at its last heartbeat (unix seconds)
    sa.Column("shared", sa.Boolean, nullable=False),  # numbers calls in the store (rollouts.next_seq), not in memory
    sa.Column("paused", sa.Boolean, nullable=False),  # holds new calls now
    sa.Column("pause_generation", sa.Integer, nullable=False),  # the pause (control.generation) it last applied
    sa.Column("in_flight", sa.Integer, nullable=False),
    sa.Column("held", sa.Integer, nullable=False),
)
"""Every gateway process on a PostgreSQL store, heartbeating (gateway.fleet); a row whose beat is stale is a gateway
gone (killed), not counted."""

control = sa.Table(
    "control", metadata,
    sa.Column("id", sa.Integer, primary_key=True),  # one row, id 1
    sa.Column("paused", sa.Boolean, nullable=False),
    sa.Column("generation", sa.Integer, nullable=False),  # + 1 at each pause: what a gateway acknowledges
    sa.Column("paused_since", sa.Float),  # unix seconds, while paused
    sa.Column("paused_total_s", sa.Float, nullable=False),  # seconds paused before the current pause
)
"""The pause every gateway on the store honours (admin pause/resume on any of them)."""


ADDED_COLUMNS: dict[str, tuple[str, ...]] = {"calls": ("extra_choices", "side", "sampling", "error_code",
                                                        "continuation", "recorded_prefix"),
                                              "rollouts": ("next_seq", "sampling_seed", "calls_closed_at")}
"""Columns added to existing tables after the first release, by table: an older database gets them on open."""
ADDED_INDEXES = (CONTINUED,)
"""Indexes added to existing tables after the first release: an older database gets them on open (IF NOT EXISTS)."""


def create_tables(conn: sa.Connection) -> list[str]:
    """Create the missing tables, then add the `ADDED_COLUMNS` and `ADDED_INDEXES` an older database lacks; the
    `table.column`s added."""
    metadata.create_all(conn)
    added = []
    for table_name, names in ADDED_COLUMNS.items():
        present = {column["name"] for column in sa.inspect(conn).get_columns(table_name)}
        for name in names:
            if name not in present:
                conn.exec_driver_sql(add_column_ddl(metadata.tables[table_name].c[name], conn.dialect))
                added.append(f"{table_name}.{name}")
    for index in ADDED_INDEXES:
        conn.execute(sa.schema.CreateIndex(index, if_not_exists=True))
    unique_call_numbers(conn)
    call_fence.install(conn)
    return added


def unique_call_numbers(conn: sa.Connection) -> None:
    """Give an older store the unique index on (rollout_id, attempt, seq) in place of its plain one; RuntimeError
    naming the rows and the fix when it already holds duplicates (nothing is changed then)."""
    present = {index["name"] for index in sa.inspect(conn).get_indexes("calls")}
    if UNIQUE_CALL_NUMBER not in present:
        duplicates = conn.execute(sa.text(
            "SELECT rollout_id, attempt, seq, count(*) AS n FROM calls GROUP BY rollout_id, attempt, seq"
            " HAVING count(*) > 1 ORDER BY rollout_id, attempt, seq LIMIT 5")).all()
        if duplicates:
            named = ", ".join(f"{row.rollout_id!r} attempt {row.attempt} seq {row.seq} ({row.n} rows)"
                              for row in duplicates)
            raise RuntimeError(f"the store's calls table holds several rows with one call number ({named}), so the "
                               f"unique index on (rollout_id, attempt, seq) cannot be made; keep the first of each "
                               f"({KEEP_FIRST_CALL}) and open the store again")
        conn.execute(sa.schema.CreateIndex(UNIQUE_CALL_INDEX, if_not_exists=True))
    if OLD_CALL_INDEX in present:
        conn.execute(sa.text(f"DROP INDEX IF EXISTS {OLD_CALL_INDEX}"))


def add_column_ddl(column: sa.Column, dialect: sa.Dialect) -> str:
    """`ALTER TABLE ... ADD COLUMN` of `column` in `dialect` (PostgreSQL: IF NOT EXISTS, as several gateways may open
    one database at once). A NOT NULL column must have a server default, which fills the existing rows."""
    if not column.nullable and column.server_default is None:
        raise ValueError(f"column {column.table.name}.{column.name} is NOT NULL without a server default: an older "
                         "database's rows could not be filled; give it a server_default")
    guard = " IF NOT EXISTS" if dialect.name == "postgresql" else ""
    ddl = f"ALTER TABLE {column.table.name} ADD COLUMN{guard} {column.name} {column.type.compile(dialect=dialect)}"
    if column.server_default is not None:
        default = column.server_default.arg.compile(dialect=dialect, compile_kwargs={"literal_binds": True})
        ddl += f" DEFAULT {default}"
    return ddl + ("" if column.nullable else " NOT NULL")
