"""How fast Medbay heals, from the append-only history: the figures a site watches.

- fault -> node out of service: an incident's first report to the first change of its
  node into a status that takes no new work, while the incident's first run was open;
- fault -> job running again: for each job a run requeued, the incident's first report
  (or the run's creation, for an admin's run) to the job's next RUNNING;
- incident -> decided: the first report to the incident's first run or breaker refusal;
- time between incidents per node: critical incidents of the node's own (not one share
  of a fault on several nodes), as the lemon report counts them.

Histograms are cumulative over the history the database keeps; each cluster has a
series from the start (all zeros), so Prometheus's rate() sees the first fault arrive.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.db.models import Min, OuterRef, Subquery
from prometheus_client.core import CounterMetricFamily, SummaryMetricFamily
from prometheus_client.registry import Collector

from clusters.models import Cluster, Node, NodeStateChange, NodeStatus
from health.models import Incident, Severity
from jobs.models import JobState, JobStateChange
from portal.metrics.families import histogram, seconds_between
from remediation.models import BreakerRefusal, JobEffect, Remediation, RemediationJob

# Statuses in which a node takes no new work. Draining counts: its running jobs are
# being moved off, and nothing new lands on it.
OUT_OF_SERVICE = (
    NodeStatus.DRAINING,
    NodeStatus.DRAINED,
    NodeStatus.DOWN,
    NodeStatus.FAIL,
    NodeStatus.REPLACING,
    NodeStatus.IN_REPAIR,
)


class RecoveryCollector(Collector):
    def __init__(self, clock):
        self.clock = clock

    def collect(self):
        now = self.clock()
        clusters = list(Cluster.objects.order_by("name").values_list("name", flat=True))
        yield per_cluster_histogram(
            "medbay_fault_to_out_of_service_seconds",
            "Time from an incident's first report to its node being out of service "
            "(draining, drained, down, fail, replacing or in repair), for incidents "
            "with a run.",
            clusters,
            fault_to_out_of_service(now),
        )
        yield per_cluster_histogram(
            "medbay_fault_to_job_running_seconds",
            "Time from the fault to a job running again, for each job a run requeued.",
            clusters,
            fault_to_job_running(),
        )
        yield per_cluster_histogram(
            "medbay_incident_to_decision_seconds",
            "Time from an incident's first report to its first run or breaker refusal.",
            clusters,
            incident_to_decision(),
        )
        yield from incidents_per_node()


def per_cluster_histogram(name, documentation, clusters, observations):
    every = {(cluster,): [] for cluster in clusters}
    for cluster, seconds in observations:
        every.setdefault((cluster,), []).append(seconds)
    return histogram(name, documentation, ["cluster"], every)


def fault_to_out_of_service(now: datetime):
    """Each remediated incident's first run, with its node's first change out of service
    at or after the report: one index seek on (node, at) per run, not the history."""
    first_out = (
        NodeStateChange.objects.filter(
            node_id=OuterRef("incident__node_id"),
            to_status__in=OUT_OF_SERVICE,
            at__gte=OuterRef("incident__opened_at"),
        )
        .order_by("at")
        .values("at")[:1]
    )
    rows = (
        Remediation.objects.filter(incident__isnull=False)
        .annotate(out_at=Subquery(first_out))
        .values_list(
            "incident_id", "node__cluster__name", "incident__opened_at", "finished_at", "out_at"
        )
        .order_by("-created_at", "-pk")
    )
    # Newest first, so the first run of each incident is the one the dict keeps.
    first_runs = {row[0]: row[1:] for row in rows}
    for cluster, opened_at, finished_at, out_at in first_runs.values():
        # Only while the run was open: a later drain belongs to another fault.
        if out_at is not None and out_at <= (finished_at or now):
            yield cluster, seconds_between(opened_at, out_at)


def fault_to_job_running():
    """Each job a run requeued, with its first RUNNING after the requeue."""
    running_again = (
        JobStateChange.objects.filter(
            job__cluster_id=OuterRef("remediation__node__cluster_id"),
            job__slurm_id=OuterRef("slurm_job_id"),
            to_state=JobState.RUNNING,
            at__gte=OuterRef("at"),
        )
        .order_by("at")
        .values("at")[:1]
    )
    rows = (
        RemediationJob.objects.filter(effect=JobEffect.REQUEUED)
        .annotate(running_at=Subquery(running_again))
        .filter(running_at__isnull=False)
        .values_list(
            "remediation__node__cluster__name",
            "remediation__incident__opened_at",
            "remediation__created_at",
            "running_at",
        )
        .order_by()
    )
    for cluster, opened_at, created_at, running_at in rows:
        yield cluster, seconds_between(opened_at or created_at, running_at)


def incident_to_decision():
    decided: dict[int, datetime] = {}
    for model, at in ((Remediation, "created_at"), (BreakerRefusal, "at")):
        rows = (
            model.objects.filter(incident__isnull=False)
            .values("incident_id")
            .annotate(first=Min(at))
            .values_list("incident_id", "first")
            .order_by()
        )
        for incident_id, first in rows:
            decided[incident_id] = min(first, decided.get(incident_id, first))
    opened = Incident.objects.filter(pk__in=list(decided)).values_list(
        "pk", "node__cluster__name", "opened_at"
    )
    for pk, cluster, opened_at in opened.order_by():
        yield cluster, seconds_between(opened_at, decided[pk])


def incidents_per_node():
    """Every node's critical incidents of its own, and the time between them."""
    total = CounterMetricFamily(
        "medbay_node_incidents",
        "Critical incidents of a node's own (not a share of a fault on several nodes).",
        labels=["cluster", "node"],
    )
    between = SummaryMetricFamily(
        "medbay_node_incident_interval_seconds",
        "Time between a node's consecutive critical incidents of its own (lemon-watching).",
        labels=["cluster", "node"],
    )
    opened: dict[int, list[datetime]] = defaultdict(list)
    for node_id, at in (
        Incident.objects.filter(severity=Severity.CRITICAL, group__isnull=True)
        .values_list("node_id", "opened_at")
        .order_by("opened_at")
    ):
        opened[node_id].append(at)
    nodes = Node.objects.values_list("pk", "cluster__name", "name")
    nodes = nodes.order_by("cluster__name", "name")
    for pk, cluster, name in nodes:
        times = opened.get(pk, [])
        total.add_metric([cluster, name], len(times))
        if times:
            gaps = [seconds_between(a, b) for a, b in zip(times, times[1:], strict=False)]
            between.add_metric([cluster, name], len(gaps), float(sum(gaps)))
    yield total
    yield between
