"""The all-clusters overview: per cluster its nodes by state, GPUs out, runs and sync.

A page that combines apps (the fleet, remediation, the sync's record), so it sits with
the portal. A fixed handful of grouped queries whatever the number of clusters or nodes.

Live: a change of a cluster's nodes or of its sync's state pokes the page
(clusters.live), which fetches its cards again; one rendering serves every open
overview for a few seconds, and the page also fetches them now and then, so that
"synced 3 s ago" does not stay on the page for an hour.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, Q
from django.shortcuts import render
from django.utils import timezone
from django.utils.timesince import timesince

from clusters.board import OUT_OF_SERVICE
from clusters.live import OVERVIEW_REGION
from clusters.models import Cluster, Gpu, GpuHealth, Node, NodeStatus
from core.roles import ANY_ROLE, role_required
from portal.regions import pushable, shared_region
from remediation.models import Remediation
from remediation.transitions import ACTIVE

# A sync whose last good cycle is older than this many intervals (and at least
# STALE_MIN) has stopped or keeps failing, whatever the controller last said.
STALE_INTERVALS = 10
STALE_MIN = timedelta(seconds=30)
# One rendering of the cards serves every open overview within this many seconds: the
# sync's age in words is no truer than that.
RENDERING_SHARED_S = 5


@dataclass
class ClusterSummary:
    cluster: Cluster
    nodes_by_status: list[tuple[str, int]] = field(default_factory=list)
    node_count: int = 0
    gpus_out: int = 0
    active_runs: int = 0
    sync_ok: bool = True
    sync_words: str = ""


def summaries(now: datetime | None = None) -> list[ClusterSummary]:
    now = now or timezone.now()
    clusters = list(Cluster.objects.order_by("-enabled", "name"))
    statuses = {}
    for cluster_id, status, number in (
        Node.objects.values_list("cluster_id", "status").annotate(n=Count("id")).order_by()
    ):
        statuses.setdefault(cluster_id, {})[status] = number
    out = Q(health=GpuHealth.FAILED) | Q(node__status__in=sorted(OUT_OF_SERVICE))
    out |= ~Q(node__active_remediation="")
    gpus_out = dict(
        Gpu.objects.filter(out).values_list("node__cluster_id").annotate(n=Count("id")).order_by()
    )
    runs = dict(
        Remediation.objects.filter(status__in=[str(s) for s in ACTIVE])
        .values_list("node__cluster_id")
        .annotate(n=Count("id"))
        .order_by()
    )
    order = {value: index for index, value in enumerate(NodeStatus.values)}
    found = []
    for cluster in clusters:
        by_status = statuses.get(cluster.pk, {})
        ok, words = sync_said(cluster, now)
        found.append(
            ClusterSummary(
                cluster=cluster,
                nodes_by_status=sorted(by_status.items(), key=lambda kv: order.get(kv[0], 99)),
                node_count=sum(by_status.values()),
                gpus_out=gpus_out.get(cluster.pk, 0),
                active_runs=runs.get(cluster.pk, 0),
                sync_ok=ok,
                sync_words=words,
            )
        )
    return found


def sync_said(cluster: Cluster, now: datetime) -> tuple[bool, str]:
    """Whether the cluster's sync is keeping up, said in words from what the sync
    recorded: the controller's state, when it went away, the last good cycle."""
    if not cluster.enabled:
        return False, "Disabled: Medbay does not sync it."
    last = cluster.last_sync_at
    if not cluster.controller_up:
        since = cluster.controller_down_since
        when = f" for {timesince(since, now)}" if since else ""
        return False, f"Slurm controller unreachable{when}: showing the last state read."
    if cluster.sync_error:
        since = cluster.sync_error_since
        when = f" for {timesince(since, now)}" if since else ""
        return False, f"Sync failing{when}: showing the last state read."
    if last is None:
        return False, "Never synced yet."
    stale_after = max(STALE_MIN, timedelta(seconds=STALE_INTERVALS * cluster.sync_interval_s))
    age = now - last
    if age > stale_after:
        return False, f"Sync stale: the last good cycle was {timesince(last, now)} ago."
    if age < timedelta(minutes=1):
        return True, f"Synced {max(0, int(age.total_seconds()))} s ago."
    return True, f"Synced {timesince(last, now)} ago."


@pushable(OVERVIEW_REGION)
@role_required(*ANY_ROLE)
def overview(request):
    """Every cluster at a glance: everyone who may see the board may see this."""
    if request.htmx and request.htmx.target == OVERVIEW_REGION:
        # The same cards for everyone: one rendering per version and a few seconds.
        moment = int(timezone.now().timestamp()) // RENDERING_SHARED_S
        return shared_region(
            request,
            OVERVIEW_REGION,
            lambda: render(request, "clusters/partials/overview_cards.html", _context()),
            viewer=f"at:{moment}",
        )
    return render(request, "clusters/overview.html", _context())


def _context() -> dict:
    return {"summaries": summaries()}
