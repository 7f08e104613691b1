"""Monthly time partitions of the history tables, on PostgreSQL.

Node and job state changes and fault events are append-only and grow with the
fleet (a year of 12,500 nodes is millions of rows each). On PostgreSQL each of
these tables is range-partitioned by month on its time column, so retention
(`prune_history`) detaches and drops a month as one `DROP TABLE` instead of
deleting its rows in batches and leaving the space to VACUUM.

Django still sees `id` as each model's primary key: ids come from the table's one
identity sequence, so they stay unique, while the table's own key is `(id, time)`,
as PostgreSQL requires of a partitioned table's unique keys. A DEFAULT partition
takes rows for months that have no partition yet (history written into the past,
an agent's clock years off); `ensure_partitions` (run by `migrate`, `rollup_history`
and `prune_history`) gives every month that holds rows, and the next few, their own
partition, moving rows out of DEFAULT. SQLite keeps plain tables.
"""

from __future__ import annotations

# ruff: noqa: S608 -- the SQL here names only these tables, their partitions (from the
# catalog or built from a date) and their columns, each quoted; values are parameters.
from dataclasses import dataclass
from datetime import UTC, date, datetime

from django.db import connection, transaction
from django.utils import timezone

MONTHS_AHEAD = 3


@dataclass(frozen=True)
class HistoryTable:
    table: str
    column: str  # the time the rows are partitioned by


# Frozen names, as in a migration: the migration that partitions them imports these.
HISTORY_TABLES = (
    HistoryTable("clusters_nodestatechange", "at"),
    HistoryTable("jobs_jobstatechange", "at"),
    HistoryTable("health_healthevent", "observed_at"),
)


@dataclass(frozen=True)
class Month:
    name: str  # the partition's table
    start: datetime
    end: datetime


def supported() -> bool:
    return connection.vendor == "postgresql"


def month_start(moment: datetime) -> datetime:
    moment = moment.astimezone(UTC)
    return datetime(moment.year, moment.month, 1, tzinfo=UTC)


def next_month(start: datetime) -> datetime:
    return datetime(start.year + start.month // 12, start.month % 12 + 1, 1, tzinfo=UTC)


def partition_name(history: HistoryTable, start: datetime | date) -> str:
    return f"{history.table}_{start.year:04d}_{start.month:02d}"


def default_name(history: HistoryTable) -> str:
    return f"{history.table}_default"


def _quote(name: str) -> str:
    return connection.ops.quote_name(name)


def _check_deferred_keys(cursor) -> None:
    """Checks the transaction's deferred foreign keys now: PostgreSQL refuses to drop or
    alter a table with such checks pending (rows written earlier in the transaction).
    Django declares its keys DEFERRABLE INITIALLY DEFERRED; later writes defer again."""
    cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    cursor.execute("SET CONSTRAINTS ALL DEFERRED")


def is_partitioned(history: HistoryTable) -> bool:
    if not supported():
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass(%s)",
            [history.table],
        )
        return cursor.fetchone() is not None


def months(history: HistoryTable) -> list[Month]:
    """The table's month partitions, oldest first (DEFAULT left out)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT child.relname FROM pg_inherits"
            " JOIN pg_class child ON child.oid = pg_inherits.inhrelid"
            " WHERE pg_inherits.inhparent = to_regclass(%s)",
            [history.table],
        )
        names = {name for (name,) in cursor.fetchall()}
    prefix = f"{history.table}_"
    found = []
    for name in names:
        stamp = name.removeprefix(prefix)
        if len(stamp) == 7 and stamp[4] == "_" and stamp.replace("_", "").isdigit():
            start = datetime(int(stamp[:4]), int(stamp[5:]), 1, tzinfo=UTC)
            found.append(Month(name, start, next_month(start)))
    return sorted(found, key=lambda month: month.start)


# ------------------------------------------------------------------ converting
def partition_table(history: HistoryTable) -> None:
    """Turns a plain table into one partitioned by month, keeping its rows, indexes,
    foreign keys, checks and id sequence. Run by a migration, in its transaction."""
    _rebuild(history, partitioned=True)
    ensure_partitions(history)


def unpartition_table(history: HistoryTable) -> None:
    """The reverse migration: the same rows in one plain table."""
    _rebuild(history, partitioned=False)


def _rebuild(history: HistoryTable, *, partitioned: bool) -> None:
    """Copies the table into a new one (partitioned by month, with a DEFAULT partition,
    or plain), then takes its name, indexes, foreign keys and the id sequence's place."""
    table, column = history.table, history.column
    staging = f"{table}__new"
    with connection.cursor() as cursor:
        _check_deferred_keys(cursor)
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = %s AND indexname <> %s",
            [table, f"{table}_pkey"],
        )
        indexes = [definition for (definition,) in cursor.fetchall()]
        cursor.execute(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = to_regclass(%s) AND contype = 'f'",
            [table],
        )
        foreign_keys = cursor.fetchall()
        by_month = f" PARTITION BY RANGE ({_quote(column)})" if partitioned else ""
        cursor.execute(
            f"CREATE TABLE {_quote(staging)} (LIKE {_quote(table)} INCLUDING DEFAULTS"
            f" INCLUDING CONSTRAINTS INCLUDING IDENTITY){by_month}"
        )
        if partitioned:
            cursor.execute(
                f"CREATE TABLE {_quote(default_name(history))}"
                f" PARTITION OF {_quote(staging)} DEFAULT"
            )
        cursor.execute(
            f"INSERT INTO {_quote(staging)} OVERRIDING SYSTEM VALUE SELECT * FROM {_quote(table)}"
        )
        cursor.execute(f"SELECT max(id) FROM {_quote(table)}")
        (last_id,) = cursor.fetchone()
        cursor.execute(f"DROP TABLE {_quote(table)} CASCADE")
        cursor.execute(f"ALTER TABLE {_quote(staging)} RENAME TO {_quote(table)}")
        cursor.execute(
            f"ALTER SEQUENCE {_quote(staging + '_id_seq')} RENAME TO {_quote(table + '_id_seq')}"
        )
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence(%s, 'id'), %s, %s)",
            [table, last_id or 1, last_id is not None],
        )
        key = f"id, {_quote(column)}" if partitioned else "id"
        cursor.execute(
            f"ALTER TABLE {_quote(table)} ADD CONSTRAINT {_quote(table + '_pkey')}"
            f" PRIMARY KEY ({key})"
        )
        for definition in indexes:
            cursor.execute(definition)
        for name, definition in foreign_keys:
            cursor.execute(
                f"ALTER TABLE {_quote(table)} ADD CONSTRAINT {_quote(name)} {definition}"
            )


# ------------------------------------------------------------------ upkeep
def ensure_partitions(history: HistoryTable, *, now: datetime | None = None) -> list[str]:
    """Gives each month that holds rows in DEFAULT, and this month and the next few, a
    partition of its own, moving DEFAULT's rows of that month into it. Returns the
    partitions created. A no-op on SQLite or on a table that is not partitioned."""
    if not is_partitioned(history):
        return []
    column = _quote(history.column)
    default = _quote(default_name(history))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT date_trunc('month', {column} AT TIME ZONE 'UTC') FROM {default}"
        )
        wanted = {datetime(day.year, day.month, 1, tzinfo=UTC) for (day,) in cursor.fetchall()}
    start = month_start(now or timezone.now())
    for _ in range(MONTHS_AHEAD + 1):
        wanted.add(start)
        start = next_month(start)
    have = {month.start for month in months(history)}
    created = []
    for start in sorted(wanted - have):
        created.append(_add_month(history, start))
    return created


def _add_month(history: HistoryTable, start: datetime) -> str:
    """One month's partition, filled with DEFAULT's rows of that month, then attached
    (ATTACH checks that DEFAULT holds none of the month's rows any more)."""
    name = partition_name(history, start)
    end = next_month(start)
    table, column = _quote(history.table), _quote(history.column)
    with transaction.atomic(), connection.cursor() as cursor:
        _check_deferred_keys(cursor)
        cursor.execute(
            f"CREATE TABLE {_quote(name)} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
        )
        # The partition's own bound as a check lets ATTACH skip scanning it.
        cursor.execute(
            f"ALTER TABLE {_quote(name)} ADD CONSTRAINT {_quote(name + '_bound')}"
            f" CHECK ({column} >= %s AND {column} < %s)",
            [start, end],
        )
        cursor.execute(
            f"WITH moved AS (DELETE FROM {_quote(default_name(history))}"
            f" WHERE {column} >= %s AND {column} < %s RETURNING *)"
            f" INSERT INTO {_quote(name)} SELECT * FROM moved",
            [start, end],
        )
        cursor.execute(
            f"ALTER TABLE {table} ATTACH PARTITION {_quote(name)} FOR VALUES FROM (%s) TO (%s)",
            [start, end],
        )
        cursor.execute(f"ALTER TABLE {_quote(name)} DROP CONSTRAINT {_quote(name + '_bound')}")
    return name


def ensure_all(*, now: datetime | None = None) -> list[str]:
    created = []
    for history in HISTORY_TABLES:
        created += ensure_partitions(history, now=now)
    return created


def row_count(name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {_quote(name)}")
        return cursor.fetchone()[0]


def drop_month(history: HistoryTable, month: Month) -> int:
    """Detaches and drops one month; returns the rows it held."""
    with transaction.atomic(), connection.cursor() as cursor:
        _check_deferred_keys(cursor)
        rows = row_count(month.name)
        cursor.execute(f"ALTER TABLE {_quote(history.table)} DETACH PARTITION {_quote(month.name)}")
        cursor.execute(f"DROP TABLE {_quote(month.name)}")
    return rows
