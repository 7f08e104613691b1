"""Deleting old history once the daily rollups hold what the reports need of it.

What `prune(cutoff)` deletes, and only before the clusters' rollup marks (so the
rollups already hold those days):

- node state changes before the cutoff, except each node's last one before it
  (the status a node is in at the cutoff, which reports over later days start
  from);
- job state changes of jobs that ended before the cutoff;
- fault and check events (`health.HealthEvent`) observed before the cutoff whose
  incident, if any, saw its last event before it (closed long ago).

What is kept, so reports over pruned periods still show figures:
- the rollups: node seconds per status and falls into down/fail (utilization,
  availability, training share, in-service hours for MTBF, lemons and failures),
  allocated GPU-seconds per partition, account and user (utilization), fault
  events per kind, XID and check (reliability's fault table);
- incidents, remediation runs with their steps and status history, jobs
  themselves, breaker trips and accounting: the reliability, failures, lemons
  and remediation reports count them row by row, and they are a few rows per
  fault or job.

Not kept: goodput and ETTR replay each job's state history, so over a pruned
period they cover only jobs that ended after the cutoff.

On PostgreSQL the three tables are partitioned by month (reports/
partitions.py): a month before the cutoff that holds nothing to keep, and no row of
a cluster left out, is detached and dropped whole. A node's last change before the
cutoff does not hold its month back: it is first carried forward to the month's
end (same id, status and node, `actor` "retention", the reason saying since when),
where nothing else of that node lies before the cutoff. What is left (the month the
cutoff falls in, months holding a node's last change or a job still running) is
deleted in batches of ids (each its own short transaction), so memory and lock
time stay bounded whatever the size; SQLite has only the batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection, transaction
from django.db.models import CharField, F, Func, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Concat

from clusters.models import Cluster, Node, NodeStateChange
from health.models import HealthEvent, Incident
from jobs.models import Job, JobStateChange
from reports import partitions
from reports.rollups import clusters_with_nodes, midnight

BATCH = 5000


@dataclass
class Pruned:
    """Rows deleted (or, in a dry run, that would be) per table, and clusters skipped."""

    rows: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # whole month partitions

    def add(self, table: str, count: int) -> None:
        self.rows[table] = self.rows.get(table, 0) + count


def prune(
    cutoff: datetime, *, dry_run: bool = False, batch: int = BATCH, whole_months: bool = True
) -> Pruned:
    """Deletes history older than `cutoff` that the rollups hold (see the module docstring).

    Reports read raw rows from the earliest mark of all clusters on, so nothing
    after that is deleted from any cluster; a cluster not rolled up yet stops it all.
    """
    result = Pruned()
    clusters = list(clusters_with_nodes().order_by("name"))
    result.skipped = [cluster.name for cluster in clusters if cluster.history_rolled_until is None]
    if result.skipped or not clusters:
        return result
    until = min(cutoff, midnight(min(cluster.history_rolled_until for cluster in clusters)))
    seeds = {cluster.pk: _seeds(cluster, until) for cluster in clusters}
    whole = {}
    if whole_months:  # False: row by row only (bench/reports.py --prune compares the two)
        whole = _drop_whole_months(clusters, seeds, until, result, dry_run=dry_run)
    for cluster in clusters:
        for table, rows, keep in _old_rows(cluster, until, seeds[cluster.pk]):
            if table in whole:
                rows = rows.exclude(whole[table])
            result.add(table, _delete(rows, keep, dry_run=dry_run, batch=batch))
    return result


TABLES = {
    "node_state_changes": partitions.HISTORY_TABLES[0],
    "job_state_changes": partitions.HISTORY_TABLES[1],
    "health_events": partitions.HISTORY_TABLES[2],
}


def _seeds(cluster: Cluster, until: datetime) -> set[int]:
    """Each node's last state change before UNTIL: the status it is in at UNTIL."""
    last_before = NodeStateChange.objects.filter(node=OuterRef("pk"), at__lt=until).order_by(
        "-at", "-id"
    )
    seeds = Node.objects.filter(cluster=cluster).annotate(
        seed=Subquery(last_before.values("id")[:1])
    )
    return set(seeds.exclude(seed=None).values_list("seed", flat=True))


def _old_rows(cluster: Cluster, until: datetime, keep: set[int]):
    yield (
        "node_state_changes",
        NodeStateChange.objects.filter(node__cluster=cluster, at__lt=until),
        keep,
    )
    yield (
        "job_state_changes",
        JobStateChange.objects.filter(job__cluster=cluster, job__end_at__lt=until),
        set(),
    )
    yield (
        "health_events",
        HealthEvent.objects.filter(
            Q(incident__isnull=True) | Q(incident__last_event_at__lt=until),
            node__cluster=cluster,
            observed_at__lt=until,
        ),
        set(),
    )


def _drop_whole_months(clusters, seeds, until, result: Pruned, *, dry_run: bool) -> dict[str, Q]:
    """Drops (or, in a dry run, counts) each month partition that ends by UNTIL and holds
    only rows the batches would delete; returns, per table, a filter of those months."""
    if not partitions.supported():
        return {}
    ids = [cluster.pk for cluster in clusters]
    keep = sorted(set().union(*seeds.values()))
    whole: dict[str, Q] = {}
    for table, history in TABLES.items():
        if not partitions.is_partitioned(history):
            continue
        for month in partitions.months(history):
            if month.end > until:
                continue
            carried = _seeds_in(month, keep) if table == "node_state_changes" else []
            if carried and month.end == until:
                carried = []  # nowhere to carry them that is still before UNTIL
            blocking = sorted(set(keep) - set(carried))
            if _holds_keepers(table, month.name, ids, blocking, until):
                continue
            if dry_run:
                count = partitions.row_count(month.name) - len(carried)
            else:
                _carry_forward(carried, month.end)
                count = partitions.drop_month(history, month)
            result.add(table, count)
            result.dropped.append(month.name)
            span = {f"{history.column}__gte": month.start, f"{history.column}__lt": month.end}
            whole[table] = whole[table] | Q(**span) if table in whole else Q(**span)
    return whole


def _seeds_in(month, keep: list[int]) -> list[int]:
    """The nodes' last changes before the cutoff that are stored in MONTH."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id FROM {connection.ops.quote_name(month.name)} WHERE id = ANY(%s)",  # noqa: S608
            [keep],
        )
        return [pk for (pk,) in cursor.fetchall()]


def _carry_forward(seed_ids: list[int], moment: datetime) -> None:
    """Moves each node's last change before the cutoff out of a month about to be dropped
    to MOMENT, the month's end: PostgreSQL moves the row to the next month's partition,
    keeping its id. The node has no other change between the two (the row is its last
    before the cutoff, which is later), so every report from the cutoff on reads the same
    status; from_status = to_status, so no report counts it as a change, and the reason
    keeps when the status began."""
    if not seed_ids:
        return
    NodeStateChange.objects.filter(pk__in=seed_ids).exclude(actor=RETENTION).update(
        reason=Concat(
            Value("status since "),
            Func(
                F("at"), Value("YYYY-MM-DD HH24:MI"), function="to_char", output_field=CharField()
            ),
            Value(" UTC; earlier history pruned"),
            output_field=CharField(),
        ),
        actor=RETENTION,
    )
    NodeStateChange.objects.filter(pk__in=seed_ids).update(at=moment, from_status=F("to_status"))


RETENTION = "retention"


# Per table: a row the batches would keep, or of a cluster they leave alone.
KEEPERS = {
    "node_state_changes": (
        "SELECT 1 FROM {month} row JOIN {node} node ON node.id = row.node_id"
        " WHERE row.id = ANY(%(keep)s) OR NOT node.cluster_id = ANY(%(clusters)s)"
    ),
    "job_state_changes": (
        "SELECT 1 FROM {month} row JOIN {job} job ON job.id = row.job_id"
        " WHERE job.end_at IS NULL OR job.end_at >= %(until)s"
        " OR NOT job.cluster_id = ANY(%(clusters)s)"
    ),
    "health_events": (
        "SELECT 1 FROM {month} row JOIN {node} node ON node.id = row.node_id"
        " LEFT JOIN {incident} incident ON incident.id = row.incident_id"
        " WHERE incident.last_event_at >= %(until)s OR NOT node.cluster_id = ANY(%(clusters)s)"
    ),
}


def _holds_keepers(table: str, month: str, clusters: list[int], keep: list[int], until) -> bool:
    quote = connection.ops.quote_name
    sql = KEEPERS[table].format(
        month=quote(month),
        node=quote(Node._meta.db_table),
        job=quote(Job._meta.db_table),
        incident=quote(Incident._meta.db_table),
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT EXISTS ({sql})",  # noqa: S608 (a partition's name from the catalog)
            {"keep": keep, "clusters": clusters, "until": until},
        )
        return cursor.fetchone()[0]


def _delete(rows: QuerySet, keep: set[int], *, dry_run: bool, batch: int) -> int:
    """Deletes ROWS but KEEP by ascending id, BATCH at a time; returns how many."""
    deleted, last = 0, 0
    while True:
        ids = list(rows.filter(pk__gt=last).order_by("pk").values_list("pk", flat=True)[:batch])
        if not ids:
            return deleted
        last = ids[-1]
        doomed = [pk for pk in ids if pk not in keep]
        if doomed and not dry_run:
            with transaction.atomic():
                rows.model.objects.filter(pk__in=doomed).delete()
        deleted += len(doomed)
