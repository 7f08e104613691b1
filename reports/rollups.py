"""Daily rollups of node, job and fault history, so a year of reports need not replay raw rows.

What is rolled up, per whole UTC day:
- `clusters.NodeStateDay`: node-seconds per status and kind of node (GPU count,
  partitions, pool): the utilization, availability and training-share charts;
- `clusters.NodeDayTotal`: each node's running totals (seconds installed, out of
  service, falls into down/fail) through the day, so any range's per-node figures
  (downtime table, in-service hours for MTBF, lemons and failures) are two rows
  apart whatever its length;
- `jobs.JobDay`: allocated GPU-seconds per partition, account and user;
- `health.HealthEventDay`: fault events per node, kind, XID and check.
They are computed by the interval queries the reports run over raw rows
(intervals.py), a week of days at a time, so the two agree.

`roll_up(cluster)` (the `rollup_history` command, run daily by
deploy/systemd/medbay-history.timer) writes every whole day from the cluster's
mark (`Cluster.history_rolled_until`, or its first history row) up to today and
moves the mark; a week's rows are deleted and rewritten in one transaction, so
re-running it is harmless and `--since` recomputes days whose raw rows changed.
Today is never rolled up: the sync only appends rows at the present, so a whole
day in the past does not change again. Whoever writes history into the past (the
history generator) clears the cluster's rollups.

A report reads whole days before the edge (its cluster's mark, or the earliest
mark of all clusters when it combines them) from the rollups and only the rest
from raw rows. The figures are those of the raw rows with one deliberate
difference: a rolled-up day counts each node under the GPU count, partition and
pool it had when the day was rolled up, where the raw rows count a node's whole
past under what it has now; so moving a node to inference does not move its past
training days. Rollup days are UTC days, so
they are used only when the report's buckets start at UTC midnight (TIME_ZONE=UTC,
the default); otherwise the reports read raw rows as before.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

from django.db import transaction
from django.db.models import Count, F, FloatField, Q, QuerySet, Sum, Value
from django.db.models.functions import Coalesce, Floor, TruncDate
from django.utils import timezone

from clusters.models import Cluster, NodeDayTotal, NodeStateChange, NodeStateDay
from health.models import CheckStatus, EventKind, HealthEvent, HealthEventDay
from jobs.models import Job, JobDay, JobStateChange
from reports.base import FAULT_STATUSES, OUT_OF_SERVICE
from reports.intervals import (
    Epoch,
    Span,
    bucketed_sums,
    job_run_intervals,
    job_span_intervals,
    node_label,
    node_state_intervals,
)
from reports.params import clusters_with_nodes

DAY = timedelta(days=1)
CHUNK_DAYS = 7  # days rolled up per query: bounds memory (a row per node, status and day)


def midnight(day: date) -> datetime:
    return datetime.combine(day, time.min, UTC)


# ------------------------------------------------------------------ reading
def rollup_edge(span: Span) -> datetime | None:
    """Where the rollups end for this span: whole days before it come from them; or None.

    The edge is the span's own cluster's mark, or the earliest of all clusters' when it
    reads them all: one cluster rolled up further must not be read from its rollups for
    days another cluster has only as raw rows, nor the other way round.
    """
    if span.start.timestamp() % 86400 or span.bucket_seconds % 86400:
        return None  # the report's days are not UTC days
    clusters = span.of_cluster(clusters_with_nodes(), "pk")
    marks = set(clusters.values_list("history_rolled_until", flat=True))
    if not marks or None in marks:
        return None
    edge = min(midnight(min(marks)), span.data_end)
    return edge if edge > span.start else None


def _day_index(span: Span):
    start = Value(span.start.timestamp(), output_field=FloatField())
    return Floor((Epoch(F("day")) - start) / Value(span.bucket_seconds))


def _days(queryset: QuerySet, span: Span, edge: datetime) -> QuerySet:
    first = span.start.astimezone(UTC).date()
    return queryset.filter(day__gte=first, day__lt=edge.astimezone(UTC).date())


def node_sources(span: Span) -> tuple[Span, datetime | None]:
    """The span to read raw node rows for (from the rollup edge on), and the edge."""
    edge = rollup_edge(span)
    return span.after(edge), edge


def fleet_seconds(span: Span, edge: datetime | None, group: str) -> dict[tuple, list[float]]:
    """GPU-seconds per bucket for each (group value, status) from the rolled-up days."""
    if edge is None:
        return {}
    key = {"partition": F("partition_names"), "pool": F("pool_kind")}.get(group, Value(""))
    rows = (
        _days(span.of_cluster(NodeStateDay.objects.all(), "cluster"), span, edge)
        .annotate(g=key, k=_day_index(span), gpu_s=F("gpu_count") * F("seconds"))
        .values("g", "status", "k")
        .annotate(total=Sum("gpu_s"))
        .order_by()
    )
    sums: dict[tuple, list[float]] = {}
    for row in rows:
        values = sums.setdefault((row["g"], row["status"]), [0.0] * span.count)
        values[int(row["k"])] += row["total"] or 0.0
    return sums


def node_totals(span: Span, edge: datetime | None) -> dict[str, dict]:
    """Per node name: down_s, installed_s, gpu_up_s and falls over the rolled-up days."""
    if edge is None:
        return {}
    first = span.start.astimezone(UTC).date() - DAY
    last = edge.astimezone(UTC).date() - DAY
    rows = (
        span.of_cluster(NodeDayTotal.objects.filter(day__in=[first, last]), "node__cluster")
        .annotate(node_name=node_label(span))
        .values_list("node_name", "node__gpu_count", "day", "installed_s", "down_s", "falls")
    )
    totals: dict[str, dict] = {}
    for name, gpus, day, installed, down, falls in rows:
        sign = 1 if day == last else -1
        entry = totals.setdefault(
            name, {"down_s": 0.0, "installed_s": 0.0, "gpu_up_s": 0.0, "falls": 0}
        )
        entry["down_s"] += sign * down
        entry["installed_s"] += sign * installed
        entry["gpu_up_s"] += sign * gpus * (installed - down)
        entry["falls"] += sign * falls
    return totals


def job_sources(span: Span) -> list[tuple[QuerySet, str]]:
    """Job RUNNING intervals as (queryset, prefix of the job's fields), rollup days first."""
    edge = rollup_edge(span)
    raw = span.after(edge)
    sources = [(job_run_intervals(raw), "job__"), (job_span_intervals(raw), "")]
    if edge is None:
        return sources
    k = _day_index(span)
    days = _days(span.of_cluster(JobDay.objects.all(), "cluster"), span, edge).annotate(
        w=Value(1.0),
        run_state=Value("RUNNING"),
        s_off=Value(0.0),
        e_off=F("gpu_seconds"),
        k_start=k,
        k_end=k,
    )
    return [(days, ""), *sources]


def falls_per_node(span: Span) -> dict[str, int]:
    """Changes into down/fail from a status that was not a fault, per node name."""
    raw, edge = node_sources(span)
    changes = (
        span.of_cluster(NodeStateChange.objects, "node__cluster")
        .filter(at__gte=raw.raw_start, at__lt=span.data_end, to_status__in=FAULT_STATUSES)
        .exclude(from_status__in=FAULT_STATUSES)
        .annotate(node_name=node_label(span))
        .values("node_name")
        .annotate(n=Count("id"))
        .order_by()
    )
    counts = {row["node_name"]: row["n"] for row in changes}
    for name, entry in node_totals(span, edge).items():
        if entry["falls"]:
            counts[name] = counts.get(name, 0) + entry["falls"]
    return counts


def fault_events() -> QuerySet:
    """Health events that count as faults: XIDs, and failing or warning checks."""
    return HealthEvent.objects.filter(
        Q(kind=EventKind.XID) | Q(status__in=[CheckStatus.FAIL, CheckStatus.WARN], xid__isnull=True)
    )


def fault_event_counts(span: Span) -> list[dict]:
    """Fault events per (bucket k, kind, xid, check_name), from the rollup and raw rows."""
    edge = rollup_edge(span)
    width = Value(span.bucket_seconds, output_field=FloatField())
    raw = span.of_cluster(fault_events(), "node__cluster").filter(
        observed_at__gte=edge or span.start, observed_at__lt=span.data_end
    )
    raw = raw.annotate(k=Floor(span.offset(F("observed_at")) / width))
    keys = ("k", "kind", "xid", "check_name")
    counts: dict[tuple, int] = {}
    parts = [raw.values(*keys).annotate(n=Count("id")).order_by()]
    if edge is not None:
        days = _days(span.of_cluster(HealthEventDay.objects.all(), "node__cluster"), span, edge)
        days = days.annotate(k=_day_index(span))
        parts.append(days.values(*keys).annotate(n=Sum("events")).order_by())
    for part in parts:
        for row in part:
            key = (int(row["k"]), row["kind"], row["xid"], row["check_name"])
            counts[key] = counts.get(key, 0) + row["n"]
    ordered = sorted(counts, key=lambda key: (key[0], key[1], key[2] or -1, key[3]))
    return [dict(zip(keys, key, strict=True), n=counts[key]) for key in ordered]


# ------------------------------------------------------------------ writing
def first_history_day(cluster: Cluster) -> date | None:
    found = [
        NodeStateChange.objects.filter(node__cluster=cluster).order_by("at").first(),
        JobStateChange.objects.filter(job__cluster=cluster).order_by("at").first(),
    ]
    moments = [row.at for row in found if row]
    started = Job.objects.filter(cluster=cluster, start_at__isnull=False).order_by("start_at")
    if first_job := started.first():
        moments.append(first_job.start_at)
    return min(moments).astimezone(UTC).date() if moments else None


def roll_up(cluster: Cluster, *, since: date | None = None, until: date | None = None) -> int:
    """Rolls the cluster's whole days [since or its mark, until or today) up; returns days."""
    until = until or timezone.now().astimezone(UTC).date()
    mark = cluster.history_rolled_until or first_history_day(cluster) or until
    # Running totals carry on from the day before: never start after the mark.
    start = min(since, mark) if since else mark
    days = 0
    if start >= until and not cluster.history_rolled_until:
        # Nothing to roll up yet; the mark says so, or no report could use the rollups.
        Cluster.objects.filter(pk=cluster.pk).update(history_rolled_until=until)
    while start < until:
        end = min(start + timedelta(days=CHUNK_DAYS), until)
        with transaction.atomic():
            _roll_chunk(cluster, start, end)
            Cluster.objects.filter(pk=cluster.pk).update(history_rolled_until=end)
        days += (end - start).days
        start = end
    cluster.history_rolled_until = Cluster.objects.get(pk=cluster.pk).history_rolled_until
    return days


def clear_rollups(cluster: Cluster) -> None:
    """Forgets the cluster's rollups (after history was written into the past)."""
    NodeStateDay.objects.filter(cluster=cluster).delete()
    NodeDayTotal.objects.filter(node__cluster=cluster).delete()
    JobDay.objects.filter(cluster=cluster).delete()
    HealthEventDay.objects.filter(node__cluster=cluster).delete()
    Cluster.objects.filter(pk=cluster.pk).update(history_rolled_until=None)
    cluster.history_rolled_until = None


def _roll_chunk(cluster: Cluster, first: date, end: date) -> None:
    NodeStateDay.objects.filter(cluster=cluster, day__gte=first, day__lt=end).delete()
    NodeDayTotal.objects.filter(node__cluster=cluster, day__gte=first, day__lt=end).delete()
    JobDay.objects.filter(cluster=cluster, day__gte=first, day__lt=end).delete()
    HealthEventDay.objects.filter(node__cluster=cluster, day__gte=first, day__lt=end).delete()
    span = Span(midnight(first), midnight(end), midnight(end), DAY, cluster_id=cluster.pk)
    days = [first + timedelta(days=index) for index in range(span.count)]
    _node_days(cluster, span, days)
    JobDay.objects.bulk_create(_job_days(cluster, span, days), batch_size=5000)
    HealthEventDay.objects.bulk_create(_event_days(cluster, span), batch_size=5000)


def _event_days(cluster: Cluster, span: Span) -> list[HealthEventDay]:
    rows = (
        fault_events()
        .filter(node__cluster=cluster, observed_at__gte=span.start, observed_at__lt=span.end)
        .annotate(day=TruncDate("observed_at", tzinfo=UTC))
        .values("node_id", "day", "kind", "xid", "check_name")
        .annotate(n=Count("id"))
        .order_by()
    )
    return [
        HealthEventDay(
            node_id=row["node_id"],
            day=row["day"],
            kind=row["kind"],
            xid=row["xid"],
            check_name=row["check_name"],
            events=row["n"],
        )
        for row in rows
    ]


def _node_days(cluster: Cluster, span: Span, days: list[date]) -> None:
    rows = node_state_intervals(span, weight=Value(1))
    sums = bucketed_sums(rows.annotate(nid=F("node_id")), span, ["nid", "status"])
    kinds = {
        pk: (gpus, partitions or "", pool or "")
        for pk, gpus, partitions, pool in cluster.nodes.values_list(
            "pk", "gpu_count", "partition_names", "pool__kind"
        )
    }
    fleet: dict[tuple, float] = {}
    daily: dict[tuple, list] = {}  # (node, day index) -> [installed, down, falls]
    for (node_id, status), seconds in sums.items():
        for index, value in enumerate(seconds):
            if value > 0:
                key = (index, status, *kinds[node_id])
                fleet[key] = fleet.get(key, 0.0) + value
                cell = daily.setdefault((node_id, index), [0.0, 0.0, 0])
                cell[0] += value
                cell[1] += value if status in OUT_OF_SERVICE else 0.0
    for row in _falls(cluster, span):
        index = (row["day"] - days[0]).days
        daily.setdefault((row["node_id"], index), [0.0, 0.0, 0])[2] += row["n"]
    NodeStateDay.objects.bulk_create(
        (
            NodeStateDay(cluster=cluster, day=days[index], status=status, gpu_count=gpus,
                         partition_names=partitions, pool_kind=pool, seconds=seconds)
            for (index, status, gpus, partitions, pool), seconds in fleet.items()
        ),
        batch_size=5000,
    )  # fmt: skip
    NodeDayTotal.objects.bulk_create(_running_totals(cluster, days, daily), batch_size=5000)


def _falls(cluster: Cluster, span: Span):
    return (
        NodeStateChange.objects.filter(
            node__cluster=cluster, at__gte=span.start, at__lt=span.end, to_status__in=FAULT_STATUSES
        )
        .exclude(from_status__in=FAULT_STATUSES)
        .annotate(day=TruncDate("at", tzinfo=UTC))
        .values("node_id", "day")
        .annotate(n=Count("id"))
        .order_by()
    )


def _running_totals(cluster: Cluster, days: list[date], daily: dict):
    """A row per node and day from the node's first history on: totals through that day."""
    before = NodeDayTotal.objects.filter(node__cluster=cluster, day=days[0] - DAY)
    running = {row.node_id: [row.installed_s, row.down_s, row.falls] for row in before}
    for node_id, _ in daily:
        running.setdefault(node_id, [0.0, 0.0, 0])
    for index, day in enumerate(days):
        for node_id, total in running.items():
            if cell := daily.get((node_id, index)):
                total[0] += cell[0]
                total[1] += cell[1]
                total[2] += cell[2]
            if not any(total):
                continue  # no history yet: a missing row reads as zeros
            yield NodeDayTotal(
                node_id=node_id, day=day, installed_s=total[0], down_s=total[1], falls=total[2]
            )


def _job_days(cluster: Cluster, span: Span, days: list[date]) -> list[JobDay]:
    totals: dict[tuple, float] = {}
    fields = ("partition", "account", "user")
    for rows, prefix in ((job_run_intervals(span), "job__"), (job_span_intervals(span), "")):
        rows = rows.annotate(
            **{f"g_{name}": Coalesce(F(prefix + name), Value("")) for name in fields}
        )
        groups = [f"g_{name}" for name in fields]
        sums = bucketed_sums(rows, span, groups, "run_state = 'RUNNING'", ["run_state"])
        for key, seconds in sums.items():
            for day, value in zip(days, seconds, strict=True):
                if value > 0:
                    totals[(day, *key)] = totals.get((day, *key), 0.0) + value
    return [
        JobDay(
            cluster=cluster, day=day, partition=part, account=account, user=user, gpu_seconds=value
        )
        for (day, part, account, user), value in totals.items()
    ]
