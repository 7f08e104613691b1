"""Brakes on automation: the circuit breaker and flapping-node quarantine.

A bad driver push or a cooling failure makes many nodes report faults at once;
draining all of them would do more harm than the faults. The breaker caps how
many nodes automatic remediation may take out: per partition a share of its
nodes (at least one), and cluster-wide a number of nodes per time window. While
it is open, automatic triggers are counted and dropped, never queued, so when it
closes nothing stale is replayed. Admin-requested runs are never blocked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, F, Q
from django.utils import timezone

from clusters.models import Node, Partition
from clusters.remediation.models import (
    Action,
    BreakerRefusal,
    BreakerTrip,
    Remediation,
    Trigger,
)
from clusters.remediation.transitions import ACTIVE, RunStatus
from health.models import Incident, Severity

# Actions that take a node out of scheduling; notify and restart_app do not.
DRAINING_ACTIONS = tuple(
    str(action)
    for action in Action
    if action not in (Action.NOTIFY, Action.RESTART_APP, Action.UNCORDON)
)
CLUSTER_WIDE = ""


def partition_pct() -> float:
    return float(getattr(settings, "MEDBAY_BREAKER_PARTITION_PCT", 10))


def max_nodes() -> int:
    return int(getattr(settings, "MEDBAY_BREAKER_MAX_NODES", 4))


def window() -> timedelta:
    return timedelta(seconds=float(getattr(settings, "MEDBAY_BREAKER_WINDOW_S", 600)))


def flap_threshold() -> int:
    return int(getattr(settings, "MEDBAY_FLAP_FAULTS", 3))


def flap_window_hours() -> float:
    return float(getattr(settings, "MEDBAY_FLAP_WINDOW_H", 24))


NEVER_ACTED = (RunStatus.PROPOSED, RunStatus.AWAITING_APPROVAL, RunStatus.REJECTED)


def _draining_runs(exclude_run: int | None = None):
    runs = Remediation.objects.filter(action__in=DRAINING_ACTIONS, dry_run=False)
    return runs.exclude(pk=exclude_run) if exclude_run else runs


def partition_cap(total: int) -> int:
    """How many of a partition's nodes may be in remediation at once (at least one)."""
    return max(1, int(total * partition_pct() // 100))


def breaker_blocks(node: Node, *, exclude_run: int | None = None) -> str:
    """Why a new automatic drain of `node` is not allowed now; "" when it is."""
    found = _breaker_reason(node, exclude_run)
    return found[1] if found else ""


def _breaker_reason(node: Node, exclude_run: int | None) -> tuple[str, str] | None:
    """(partition or "" for cluster-wide, reason) of the limit that is reached, if any."""
    runs = _draining_runs(exclude_run)
    active = runs.filter(status__in=[str(s) for s in ACTIVE], node__cluster_id=node.cluster_id)
    # Sizes and busy counts of all the node's partitions in two queries, not two each.
    mine = Partition.objects.filter(nodes=node).values("pk")
    partitions = Partition.objects.filter(pk__in=mine).annotate(total=Count("nodes"))
    partitions = list(partitions.order_by("name"))
    busy_in = dict(
        active.filter(node__partitions__in=[p.pk for p in partitions])
        .values_list("node__partitions")
        .annotate(busy=Count("node", distinct=True))
    )
    for partition in partitions:
        total, busy = partition.total, busy_in.get(partition.pk, 0)
        if busy >= partition_cap(total):
            return partition.name, (
                f"{busy} of {total} nodes in partition {partition.name} are already in "
                f"remediation (limit {partition_pct():g}%)"
            )
    since = timezone.now() - window()
    # A run that is waiting for, or was refused, approval took no node out, nor
    # did one cancelled before its first step. A started one counts before it
    # has written a step: a storm is caught before the engine gets to it.
    recent = (
        runs.filter(node__cluster_id=node.cluster_id, created_at__gte=since)
        .exclude(status__in=NEVER_ACTED)
        .filter(~Q(status=RunStatus.CANCELLED) | Q(steps__isnull=False))
        .exclude(trigger=Trigger.ADMIN)
        .values("node")
        .distinct()
        .count()
    )
    if recent >= max_nodes():
        minutes = window().total_seconds() / 60
        return CLUSTER_WIDE, (
            f"{recent} nodes were taken out automatically in the last {minutes:g} min "
            f"(limit {max_nodes()})"
        )
    return None


def admit_automatic(node: Node, *, incident=None, action: str = "") -> str:
    """ "" if automation may drain `node`; otherwise the breaker's reason, with the
    refusal written down (which incident, which node, why) and counted on the trip."""
    found = _breaker_reason(node, None)
    if found is None:
        return ""
    partition, reason = found
    trip = BreakerTrip.objects.filter(partition=partition, closed_at__isnull=True).first()
    if trip is None:
        trip = BreakerTrip.objects.create(partition=partition, reason=reason[:255], suppressed=1)
    else:
        BreakerTrip.objects.filter(pk=trip.pk).update(suppressed=F("suppressed") + 1)
    BreakerRefusal.objects.create(
        trip=trip, incident=incident, node=node, action=action, reason=reason[:255]
    )
    return reason


@dataclass(frozen=True)
class BreakerState:
    """For the banner: whether automation is paused, where, and how much it dropped."""

    open: bool
    trips: list[BreakerTrip] = field(default_factory=list)

    @property
    def suppressed(self) -> int:
        return sum(trip.suppressed for trip in self.trips)


def breaker_state() -> BreakerState:
    """Open trips, after closing those whose limit is no longer reached."""
    close_recovered_trips()
    trips = list(BreakerTrip.objects.filter(closed_at__isnull=True).order_by("opened_at"))
    return BreakerState(open=bool(trips), trips=trips)


def close_recovered_trips() -> int:
    """Close trips whose partition (or the cluster) is back under its limits.

    Suppressed triggers are not replayed on closing: they were dropped when they
    arrived, and faults that persist will report again.
    """
    closed = 0
    for trip in BreakerTrip.objects.filter(closed_at__isnull=True):
        if not _still_over(trip):
            closed += BreakerTrip.objects.filter(pk=trip.pk, closed_at__isnull=True).update(
                closed_at=timezone.now()
            )
    return closed


def _still_over(trip: BreakerTrip) -> bool:
    runs = _draining_runs()
    if trip.partition == CLUSTER_WIDE:
        since = timezone.now() - window()
        recent = runs.filter(created_at__gte=since).exclude(trigger=Trigger.ADMIN)
        return recent.values("node").distinct().count() >= max_nodes()
    partitions = Partition.objects.filter(name=trip.partition)
    for partition in partitions:
        busy = runs.filter(status__in=[str(s) for s in ACTIVE], node__partitions=partition)
        if busy.values("node").distinct().count() >= partition_cap(partition.nodes.count()):
            return True
    return False


def fault_count(node: Node) -> int:
    """Critical fault bursts (incidents) on `node` within the flapping window."""
    since = timezone.now() - timedelta(hours=flap_window_hours())
    return Incident.objects.filter(
        node=node, severity=Severity.CRITICAL, last_event_at__gte=since
    ).count()


def is_flapping(node: Node) -> bool:
    return fault_count(node) >= flap_threshold()
