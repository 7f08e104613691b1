"""The fleet's figures: nodes, GPUs, spares, agents, faults and each cluster's sync."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, Max, Q, Sum
from django.db.models.functions import Coalesce
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from clusters.models import Cluster, Gpu, GpuHealth, Node, NodePool, NodeStatus, PoolKind
from health.models import EventKind, HealthEvent, NodeToken
from portal.metrics.families import count_every_choice


class FleetCollector(Collector):
    """What the board shows, counted: read from the database at each scrape."""

    def __init__(self, clock):
        self.clock = clock

    def collect(self):
        now = self.clock()
        yield health_events()
        yield xid_events()
        nodes = "Nodes by the status the board shows."
        yield count_every_choice("medbay_nodes", nodes, Node.objects, "status", NodeStatus)
        yield count_every_choice("medbay_gpus", "GPUs by health.", Gpu.objects, "health", GpuHealth)
        yield from clusters(now)
        yield spares_free()
        yield from agents(now)


def health_events() -> CounterMetricFamily:
    family = CounterMetricFamily(
        "medbay_health_events_ingested",
        "Health events ingested from node agents, repeats included, by kind and severity.",
        labels=["kind", "severity"],
    )
    rows = (
        HealthEvent.objects.values_list("kind", "severity")
        .annotate(total=Sum("count"))
        .order_by("kind", "severity")
    )
    for kind, severity, total in rows:
        family.add_metric([kind, severity], total or 0)
    return family


def xid_events() -> CounterMetricFamily:
    """Per node and XID: only nodes that reported one have series, so a fleet of
    thousands of healthy nodes adds none."""
    family = CounterMetricFamily(
        "medbay_xid_events",
        "XID events ingested, repeats included, by cluster, node and XID code.",
        labels=["cluster", "node", "xid"],
    )
    rows = (
        HealthEvent.objects.filter(kind=EventKind.XID, xid__isnull=False)
        .values_list("node__cluster__name", "node__name", "xid")
        .annotate(total=Sum("count"))
        .order_by()
    )
    for cluster, node, xid, total in sorted(rows):
        family.add_metric([cluster, node, str(xid)], total or 0)
    return family


def clusters(now: datetime):
    lag = GaugeMetricFamily(
        "medbay_sync_lag_seconds",
        "Seconds since the cluster was last reconciled from Slurm (+Inf: never).",
        labels=["cluster"],
    )
    up = GaugeMetricFamily(
        "medbay_controller_up",
        "1 when the cluster's Slurm controller answers.",
        labels=["cluster"],
    )
    for name, last_sync_at, controller_up in Cluster.objects.order_by("name").values_list(
        "name", "last_sync_at", "controller_up"
    ):
        # Never synced is infinitely stale, so a `> 60` alert fires for it too.
        seconds = (now - last_sync_at).total_seconds() if last_sync_at else math.inf
        lag.add_metric([name], max(seconds, 0.0))
        up.add_metric([name], 1 if controller_up else 0)
    yield lag
    yield up


def spares_free() -> GaugeMetricFamily:
    """Spares a replacement could take now: idle in a spare pool, not in repair and with
    no run of their own (remediation.spares may still pass over one whose GPU is unsound)."""
    family = GaugeMetricFamily(
        "medbay_spares_free",
        "Idle spare nodes free for a replacement, by cluster and spare pool.",
        labels=["cluster", "pool"],
    )
    free = Q(
        nodes__status=NodeStatus.SPARE,
        nodes__in_repair_since__isnull=True,
        nodes__active_remediation="",
    )
    pools = (
        NodePool.objects.filter(kind=PoolKind.SPARE)
        .annotate(free=Count("nodes", filter=free))
        .values_list("cluster__name", "name", "free")
        .order_by("cluster__name", "name")
    )
    for cluster, pool, count in pools:
        family.add_metric([cluster, pool], count)
    return family


def agents(now: datetime):
    """Enrolled agents (a node with a live token) and those silent for longer than
    MEDBAY_AGENT_SILENT_AFTER_S: an agent run with `--interval` reports its checks
    every interval, so silence means it, its node or the network is down."""
    silent_since = now - timedelta(seconds=settings.MEDBAY_AGENT_SILENT_AFTER_S)
    rows = (
        NodeToken.objects.filter(revoked_at__isnull=True)
        .values("node__cluster__name", "node_id")
        .annotate(last=Coalesce(Max("last_used_at"), Max("created_at")))
        .values_list("node__cluster__name", "last")
        .order_by()
    )
    enrolled: dict[str, int] = {name: 0 for name in Cluster.objects.values_list("name", flat=True)}
    silent = dict.fromkeys(enrolled, 0)
    for cluster, last in rows:
        enrolled[cluster] = enrolled.get(cluster, 0) + 1
        silent[cluster] = silent.get(cluster, 0) + (1 if last < silent_since else 0)
    enrolled_family = GaugeMetricFamily(
        "medbay_agents_enrolled", "Nodes with a live agent token, by cluster.", labels=["cluster"]
    )
    silent_family = GaugeMetricFamily(
        "medbay_agents_silent",
        "Enrolled agents that have not reported for longer than MEDBAY_AGENT_SILENT_AFTER_S.",
        labels=["cluster"],
    )
    for cluster in sorted(enrolled):
        enrolled_family.add_metric([cluster], enrolled[cluster])
        silent_family.add_metric([cluster], silent[cluster])
    yield enrolled_family
    yield silent_family
