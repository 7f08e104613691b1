"""Interval arithmetic done by the database, for reports over months of history.

State intervals come from append-only history rows: a row's interval ends where
the next row of the same node (or job) begins, which `Window(Lead("at"))`
computes in SQL. Django cannot aggregate over a window function, so the
annotated queryset is compiled by the ORM and wrapped in one small, portable
`SELECT ... GROUP BY` (plain SUM/CASE arithmetic that SQLite and PostgreSQL both
speak). Python only ever sees grouped sums, never the history rows.

Splitting intervals into day or week buckets uses prefix sums instead of a
calendar table: intervals are grouped by (start bucket, end bucket) and, per
group, the weighted count and sums of start and end offsets are enough to know
how much of the group lies before any bucket boundary.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.core.exceptions import EmptyResultSet
from django.db import connection, transaction
from django.db.models import (
    Case,
    Exists,
    F,
    FloatField,
    Func,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
    Window,
)
from django.db.models.functions import Coalesce, Concat, Floor, Greatest, Lead, Least


class Epoch(Func):
    """Seconds since 1970 of a datetime expression, as a float, on both databases."""

    output_field = FloatField()

    def as_sql(self, compiler, connection, **extra_context):
        return super().as_sql(
            # date_part() returns a double; EXTRACT() returns a slower numeric since PG 14.
            compiler,
            connection,
            template="date_part('epoch', %(expressions)s)",
        )

    def as_sqlite(self, compiler, connection, **extra_context):
        # Django stores UTC datetimes as ISO text; julianday() parses it natively.
        return super().as_sql(
            compiler,
            connection,
            template="((julianday(%(expressions)s) - 2440587.5) * 86400.0)",
        )


@dataclass(frozen=True)
class Span:
    """The reporting window cut into equal buckets (the last one may be short)."""

    start: datetime
    end: datetime
    # Data are read up to here: the end of the window, or now if that is earlier.
    data_end: datetime
    bucket: timedelta
    # Raw rows are read from here (the end of the days read from the rollups), or `start`.
    data_from: datetime | None = None
    # The cluster whose rows are read (its pk), or None for every cluster's.
    cluster_id: int | None = None
    # Several clusters read together: a node is named with its cluster (node_label).
    qualified: bool = False

    def of_cluster(self, queryset, path: str):
        """QUERYSET's rows of the span's cluster, PATH leading to their cluster ("node__cluster");
        every row when the span reads all clusters."""
        if self.cluster_id is None:
            return queryset.all()
        return queryset.filter(**{path: self.cluster_id})

    @property
    def raw_start(self) -> datetime:
        return self.data_from or self.start

    def after(self, moment: datetime | None) -> Span:
        """This span with raw rows read only from `moment` on (None: from its start)."""
        return replace(self, data_from=moment) if moment else self

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    @property
    def data_seconds(self) -> float:
        return max(0.0, (self.data_end - self.start).total_seconds())

    @property
    def bucket_seconds(self) -> float:
        return self.bucket.total_seconds()

    @property
    def count(self) -> int:
        return max(1, math.ceil(self.seconds / self.bucket_seconds))

    def boundary(self, index: int) -> float:
        """Offset in seconds of the start of bucket `index` (index == count is the end)."""
        return min(index * self.bucket_seconds, self.seconds)

    def bucket_starts(self) -> list[datetime]:
        return [self.start + index * self.bucket for index in range(self.count)]

    def offset(self, expression) -> Func:
        """Seconds from the window's start to a datetime expression."""
        return Epoch(expression) - Value(self.start.timestamp(), output_field=FloatField())

    def clip(self, start_expr, end_expr) -> dict:
        """`s_off`/`e_off`: an interval in seconds from the start, clipped to the data."""
        return {
            "s_off": Greatest(
                self.offset(start_expr),
                Value((self.raw_start - self.start).total_seconds()),
            ),
            "e_off": Least(self.offset(end_expr), Value(self.data_seconds)),
        }

    def buckets(self) -> dict:
        """`k_start`/`k_end`: the buckets of `s_off` and `e_off` (annotate after `clip`)."""
        width = Value(self.bucket_seconds)
        return {"k_start": Floor(F("s_off") / width), "k_end": Floor(F("e_off") / width)}


# Sorting months of history for the window spills to disk at PostgreSQL's 4 MB
# default, and the correlated subqueries make the planner JIT-compile queries
# that run in well under a second (compiling alone took 2.4 s).
POSTGRES_SETTINGS = "SET LOCAL work_mem = '64MB'; SET LOCAL jit = off"


@contextmanager
def report_settings():
    """A transaction with POSTGRES_SETTINGS, for the reports' large sorts and groupings."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(POSTGRES_SETTINGS)
        yield


def _rows(sql: str, params: Sequence) -> list[tuple]:
    with report_settings(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def node_label(span: Span, prefix: str = "node__"):
    """A node's name as reports key and print it: its name, or "cluster/name" where the
    span combines clusters, as two clusters may each have a gpu-01."""
    if not span.qualified:
        return F(f"{prefix}name")
    return Concat(F(f"{prefix}cluster__name"), Value("/"), F(f"{prefix}name"))


class Intervals:
    """Interval rows from several querysets (raw history, and days from a rollup), unioned.

    Each part annotates the same columns; `annotate` applies to every part.
    """

    def __init__(self, *parts: QuerySet) -> None:
        self.parts = parts

    def annotate(self, **annotations) -> Intervals:
        return Intervals(*(part.annotate(**annotations) for part in self.parts))

    def sql(self, columns: Sequence[str]) -> tuple[str, tuple]:
        """`SELECT columns FROM part UNION ALL ...`; EmptyResultSet when no part has rows."""
        selects, params = [], []
        columns = list(dict.fromkeys(columns))  # as values() does: a column only once
        names = ", ".join(columns)
        for index, part in enumerate(self.parts):
            try:
                inner, inner_params = _inner(part, columns)
            except EmptyResultSet:
                continue
            selects.append(f"SELECT {names} FROM ({inner}) AS p{index}")  # noqa: S608
            params.extend(inner_params)
        if not selects:
            raise EmptyResultSet
        return " UNION ALL ".join(selects), tuple(params)


def _inner(queryset: QuerySet | Intervals, columns: Sequence[str]) -> tuple[str, tuple]:
    if isinstance(queryset, Intervals):
        return queryset.sql(columns)
    return queryset.order_by().values(*columns).query.sql_with_params()


def _wrap(queryset: QuerySet | Intervals, columns: Sequence[str]) -> tuple[str, tuple]:
    inner, params = _inner(queryset, columns)
    return f"({inner}) AS iv", params


def bucketed_sums(
    queryset: QuerySet,
    span: Span,
    groups: Sequence[str],
    where: str = "1 = 1",
    where_columns: Sequence[str] = (),
) -> dict[tuple, list[float]]:
    """Weighted seconds inside each bucket, per group: {group values: [seconds per bucket]}.

    `queryset` must annotate `w` (a weight such as a GPU count), the columns in
    `groups`, what `Span.clip` and `Span.buckets` return and the `where_columns`
    that `where` filters on.
    """
    columns = [*groups, *where_columns, "w", "s_off", "e_off", "k_start", "k_end"]
    try:
        source, params = _wrap(queryset, columns)
    except EmptyResultSet:  # e.g. `id__in=[]`: Django knows no row can match
        return {}
    # Only identifiers and expressions written in this package are spliced in;
    # every value travels as a parameter of the inner query.
    sql = f"SELECT {_bucket_select(groups, source, where)}"  # noqa: S608
    return _bucketed(_rows(sql, params), len(groups), span)


def _bucket_select(groups: Sequence[str], source: str, where: str = "1 = 1") -> str:
    """`bucketed_sums`' query after its SELECT keyword."""
    group_sql = "".join(f"{name}, " for name in groups)
    sums = "SUM(w), SUM(w * s_off), SUM(w * e_off)"
    return (
        f"{group_sql}k_start, k_end, {sums} FROM {source} WHERE e_off > s_off AND ({where})"
        f" GROUP BY {group_sql}k_start, k_end"
    )


def _bucketed(rows, group_count: int, span: Span) -> dict[tuple, list[float]]:
    cells: dict[tuple, list[tuple[int, int, float, float, float]]] = defaultdict(list)
    for row in rows:
        key, (k_start, k_end, weight, starts, ends) = tuple(row[:group_count]), row[group_count:]
        cells[key].append((int(k_start), int(k_end), weight or 0.0, starts or 0.0, ends or 0.0))
    return {key: _split(parts, span) for key, parts in cells.items()}


def bucketed_and_per_node(
    queryset: QuerySet, span: Span, groups: Sequence[str], per_node: dict[str, str]
) -> tuple[dict[tuple, list[float]], list[dict]]:
    """`bucketed_sums` over `groups` and, from the same scan, `per_node` sums per `node_name`.

    The interval query (a window over months of history) is the expensive part; as a
    CTE referenced twice it is computed once, where two queries would compute it twice.
    """
    columns = [*groups, "node_name", "status", "w", "s_off", "e_off", "k_start", "k_end"]
    try:
        inner, params = _inner(queryset, columns)
    except EmptyResultSet:
        return {}, []
    # UNION ALL needs the same columns in both branches, of matching types: the per-node
    # branch puts the name under the first group, NULL under the others (text), and its
    # sums where the bucket branch has its numbers (at most 5 of them); `part` tells
    # the branches apart.
    nulls = ["NULL"] * (len(groups) - 1)
    numbers = [*per_node.values(), *["NULL"] * (5 - len(per_node))]
    node_columns = ", ".join(["node_name", *nulls, *numbers])
    sql = (
        f"WITH iv AS ({inner}) SELECT 0 AS part, {_bucket_select(groups, 'iv')}"  # noqa: S608
        f" UNION ALL SELECT 1, {node_columns} FROM iv WHERE e_off > s_off GROUP BY node_name"
    )
    rows = _rows(sql, params)
    sums = _bucketed((row[1:] for row in rows if row[0] == 0), len(groups), span)
    first = 1 + len(groups)
    names = list(per_node)
    nodes = [
        {"node_name": row[1], **dict(zip(names, row[first : first + len(names)], strict=True))}
        for row in rows
        if row[0] == 1
    ]
    return sums, nodes


def _split(parts, span: Span) -> list[float]:
    """Per-bucket totals from (start bucket, end bucket, Σw, Σw·start, Σw·end) groups."""
    before = [0.0] * (span.count + 1)  # weighted seconds before each boundary
    for index in range(1, span.count + 1):
        boundary = span.boundary(index)
        total = 0.0
        for k_start, k_end, weight, starts, ends in parts:
            if k_end < index:
                total += ends - starts
            elif k_start < index:
                total += weight * boundary - starts
        before[index] = total
    return [before[index + 1] - before[index] for index in range(span.count)]


def summed(
    queryset: QuerySet,
    columns: Sequence[str],
    groups: Sequence[str],
    aggregates: dict[str, str],
    *,
    where: str = "1 = 1",
    order_by: str = "",
    limit: int | None = None,
) -> list[dict]:
    """Portable `SELECT groups, aggregates FROM (queryset) GROUP BY groups` as dicts.

    The aggregate expressions are plain SQL over the inner `columns`.
    """
    select = [*groups, *(f"{expression} AS {name}" for name, expression in aggregates.items())]
    try:
        source, params = _wrap(queryset, columns)
    except EmptyResultSet:
        return []
    sql = f"SELECT {', '.join(select)} FROM {source} WHERE {where}"  # noqa: S608 (as above)
    if groups:
        sql += f" GROUP BY {', '.join(groups)}"
    if order_by:
        sql += f" ORDER BY {order_by}"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    names = [*groups, *aggregates]
    return [dict(zip(names, row, strict=True)) for row in _rows(sql, params)]


def node_state_intervals(span: Span, weight=None) -> QuerySet:
    """One row per node status interval overlapping the window, weighted by GPU count.

    Only the last change before the window (before `span.raw_start`) is needed to
    know each node's status at its start, so older history is never scanned.
    """
    from clusters.models import Node, NodeStateChange

    start = span.raw_start
    last_before = NodeStateChange.objects.filter(node=OuterRef("pk"), at__lt=start).order_by(
        "-at", "-id"
    )
    nodes = span.of_cluster(Node.objects, "cluster")
    seeds = nodes.annotate(seed=Subquery(last_before.values("id")[:1])).values("seed")
    inside = span.of_cluster(NodeStateChange.objects, "node__cluster").filter(
        at__gte=start, at__lt=span.data_end
    )
    if span.data_from:
        # The days after the rollups: one IN over a UNION, as an OR makes PostgreSQL walk
        # the whole (node, at, id) index for a day of rows (16 s over a year of 12,500
        # nodes). Over months of rows the OR is the faster (the IN took 97 s, not 20 s).
        ids = inside.order_by().values("id").union(seeds.order_by(), all=True)
        rows = NodeStateChange.objects.filter(id__in=ids)
    else:
        rows = span.of_cluster(NodeStateChange.objects, "node__cluster").filter(
            Q(at__gte=start, at__lt=span.data_end) | Q(id__in=seeds)
        )
    following = Window(Lead("at"), partition_by=[F("node_id")], order_by=[F("at"), F("id")])
    rows = rows.annotate(
        w=F("node__gpu_count") if weight is None else weight,
        status=F("to_status"),
        **span.clip(F("at"), Coalesce(following, Value(span.data_end))),
    )
    return rows.annotate(**span.buckets())


def job_run_intervals(span: Span) -> QuerySet:
    """One row per RUNNING interval of a job (requeued jobs have several), weighted by GPUs.

    Filter on `run_state = 'RUNNING'` in the outer query: the window must see every
    state change of a job to know where each RUNNING interval ends.
    """
    from jobs.models import JobStateChange

    rows = span.of_cluster(JobStateChange.objects, "job__cluster").filter(
        Q(job__end_at__isnull=True) | Q(job__end_at__gt=span.raw_start), at__lt=span.data_end
    )
    following = Window(Lead("at"), partition_by=[F("job_id")], order_by=[F("at"), F("id")])
    # A still-open interval ends when the job ended, or now.
    open_end = Case(When(job__end_at__gte=F("at"), then=F("job__end_at")))
    rows = rows.annotate(
        w=F("job__gpus"),
        run_state=F("to_state"),
        **span.clip(F("at"), Coalesce(following, open_end, Value(span.data_end))),
    )
    return rows.annotate(**span.buckets())


def job_span_intervals(span: Span) -> QuerySet:
    """Jobs without any state history: one interval from start_at to end_at (or now)."""
    from jobs.models import Job, JobStateChange

    rows = span.of_cluster(Job.objects, "cluster")
    rows = rows.filter(start_at__isnull=False, start_at__lt=span.data_end).filter(
        Q(end_at__isnull=True) | Q(end_at__gt=span.raw_start)
    )
    rows = rows.exclude(Exists(JobStateChange.objects.filter(job=OuterRef("pk"))))
    rows = rows.annotate(
        w=F("gpus"),
        run_state=Value("RUNNING"),
        **span.clip(F("start_at"), Coalesce(F("end_at"), Value(span.data_end))),
    )
    return rows.annotate(**span.buckets())
