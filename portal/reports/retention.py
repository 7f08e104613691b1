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

Deletes go in batches of ids (each its own short transaction), so memory and
lock time stay bounded whatever the size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.db.models import OuterRef, Q, QuerySet, Subquery

from clusters.models import Cluster, Node, NodeStateChange
from health.models import HealthEvent
from jobs.models import JobStateChange
from portal.reports.rollups import clusters_with_nodes, midnight

BATCH = 5000


@dataclass
class Pruned:
    """Rows deleted (or, in a dry run, that would be) per table, and clusters skipped."""

    rows: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def add(self, table: str, count: int) -> None:
        self.rows[table] = self.rows.get(table, 0) + count


def prune(cutoff: datetime, *, dry_run: bool = False, batch: int = BATCH) -> Pruned:
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
    for cluster in clusters:
        for table, rows, keep in _old_rows(cluster, until):
            result.add(table, _delete(rows, keep, dry_run=dry_run, batch=batch))
    return result


def _old_rows(cluster: Cluster, until: datetime):
    last_before = NodeStateChange.objects.filter(node=OuterRef("pk"), at__lt=until).order_by(
        "-at", "-id"
    )
    seeds = Node.objects.filter(cluster=cluster).annotate(
        seed=Subquery(last_before.values("id")[:1])
    )
    keep = set(seeds.exclude(seed=None).values_list("seed", flat=True))
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
