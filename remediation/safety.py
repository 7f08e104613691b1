"""Brakes on automation: the circuit breaker and flapping-node quarantine.

A bad driver push or a cooling failure makes many nodes report faults at once;
draining all of them would do more harm than the faults. The breaker caps how
many nodes automatic remediation may take out: per partition a share of its
nodes, never fewer than a floor (MEDBAY_BREAKER_PARTITION_MIN_NODES) nor more than
the partition has, and cluster-wide a number of nodes per time window. The spare
partition has no share of its own: its nodes run no jobs, so taking a faulty spare
to repair costs no capacity in service, while leaving it free would offer a broken
node to the next replacement; the cluster-wide limit still counts spares. While
it is open, automatic triggers are counted and dropped, never queued, so when it
closes nothing stale is replayed. Admin-requested runs are never blocked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, Exists, F, Max, OuterRef, Q, Subquery
from django.utils import timezone

from clusters.backends.slurm_spares import SPARE_PARTITION
from clusters.models import Node, Partition
from health.models import FaultGroupKind, Incident, Severity
from remediation.models import (
    Action,
    BreakerRefusal,
    BreakerTrip,
    Remediation,
    RemediationStep,
    Trigger,
)
from remediation.transitions import ACTIVE, RunStatus

# Actions that take a node out of scheduling; notify and restart_app do not.
DRAINING_ACTIONS = tuple(
    str(action)
    for action in Action
    if action not in (Action.NOTIFY, Action.RESTART_APP, Action.UNCORDON)
)
CLUSTER_WIDE = ""
# A run's context names the shared part it drains for (admission._drain_for_part): the
# breaker counts all of one part's drains as one node, as the part is one fault.
PART_KEY = "part_group"


def _taken_out(node_id: int, context) -> int | tuple[str, int]:
    """What one run counts as toward the cluster-wide limit: its node, or its part."""
    part = (context or {}).get(PART_KEY) if isinstance(context, dict) else None
    return ("part", part) if part is not None else node_id


def partition_pct() -> float:
    return float(settings.MEDBAY_BREAKER_PARTITION_PCT)


def partition_min_nodes() -> int:
    return int(settings.MEDBAY_BREAKER_PARTITION_MIN_NODES)


def max_nodes() -> int:
    return int(settings.MEDBAY_BREAKER_MAX_NODES)


def window() -> timedelta:
    return timedelta(seconds=float(settings.MEDBAY_BREAKER_WINDOW_S))


def flap_threshold() -> int:
    return int(settings.MEDBAY_FLAP_FAULTS)


def flap_window_hours() -> float:
    return float(settings.MEDBAY_FLAP_WINDOW_H)


NEVER_ACTED = (RunStatus.PROPOSED, RunStatus.AWAITING_APPROVAL, RunStatus.REJECTED)


def _draining_runs(exclude_run: int | None = None):
    runs = Remediation.objects.filter(action__in=DRAINING_ACTIONS, dry_run=False)
    return runs.exclude(pk=exclude_run) if exclude_run else runs


def partition_cap(total: int) -> int:
    """How many of a partition's TOTAL nodes may be in remediation at once: its share,
    but at least the floor and at most TOTAL (and always one). Without the floor a pool
    of four at 10 % allowed one node, so a second fault waited for the first run to end."""
    share = int(total * partition_pct() // 100)
    return max(1, min(total, max(partition_min_nodes(), share)))


def _partition_limit(total: int) -> str:
    if int(total * partition_pct() // 100) >= partition_min_nodes():
        return f"limit {partition_pct():g}%"
    return (
        f"limit {partition_cap(total)}: {partition_pct():g}% of the partition, "
        f"at least {partition_min_nodes()}"
    )


def breaker_blocks(node: Node, *, exclude_run: int | None = None) -> str:
    """Why a new automatic drain of `node` is not allowed now; "" when it is."""
    found = BreakerLedger(node.cluster_id, [node.pk], exclude_run=exclude_run).reason(node.pk)
    return found[1] if found else ""


class BreakerLedger:
    """The breaker's counts for one cluster, read once and kept up to date in memory.

    A storm's incidents are decided many at a time under the cluster's lock (see
    admission.on_reported): the counts are read once for all of them, each admitted run
    is added to them, and the refusals are written together (`flush`), instead of
    five queries and two writes per incident. Runs only this ledger's holder admits
    (under the lock) can raise the counts meanwhile; runs that end meanwhile only make
    it stricter than needed until the next pass.
    """

    def __init__(self, cluster_id: int, node_ids, *, exclude_run: int | None = None):
        self.cluster_id, self.exclude_run = cluster_id, exclude_run
        self.node_ids = set(node_ids)
        self._read = False
        self._refusals: list[BreakerRefusal] = []
        self._trips: dict[str, BreakerTrip] | None = None
        self._suppressed: dict[int, int] = {}

    def _load(self) -> None:
        # No join from the runs to the cluster's nodes or partitions in SQL: the runs are
        # few (active ones, or the window's), and with such a join PostgreSQL planned from
        # the nodes (12,500) whenever its statistics had not seen the cluster yet: 12 ms a
        # query instead of 1, for every report of a storm on a newly added cluster.
        runs = _draining_runs(self.exclude_run)
        through = Node.partitions.through
        memberships = through.objects.filter(node_id__in=self.node_ids).values_list(
            "node_id", "partition_id", "partition__name"
        )
        self.partitions_of: dict[int, list[tuple[str, int]]] = {}
        for node_id, partition_id, name in memberships:
            self.partitions_of.setdefault(node_id, []).append((name, partition_id))
        for names in self.partitions_of.values():
            names.sort()
        wanted = {pk for names in self.partitions_of.values() for _, pk in names}
        # Per wanted partition, its nodes and how many of them an active run holds (one
        # active run per node, so a count), in one read of the partitions' memberships.
        # A shared part's drains count as one node (see `_count_part`).
        active = runs.filter(status__in=[str(s) for s in ACTIVE]).exclude(context__has_key=PART_KEY)
        counts = (
            through.objects.filter(partition_id__in=wanted)
            .order_by()
            .values("partition_id")
            .annotate(
                total=Count("node_id"),
                busy=Count("node_id", filter=Q(node_id__in=Subquery(active.values("node_id")))),
            )
            .values_list("partition_id", "total", "busy")
        )
        self.totals: dict[int, int] = {}
        self.busy: dict[int, int] = dict.fromkeys(wanted, 0)
        if wanted:
            for partition_id, total, busy in counts:
                self.totals[partition_id], self.busy[partition_id] = total, busy
        self._parts_counted: set[tuple[int, int]] = set()
        parts = runs.filter(status__in=[str(s) for s in ACTIVE], context__has_key=PART_KEY)
        part_of = {
            node: context[PART_KEY] for node, context in parts.values_list("node_id", "context")
        }
        if part_of and wanted:
            members = through.objects.filter(node_id__in=part_of, partition_id__in=wanted)
            for node_id, partition_id in members.values_list("node_id", "partition_id"):
                self._count_part(partition_id, part_of[node_id])
        # A run that is waiting for, or was refused, approval took no node out, nor
        # did one cancelled before its first step. A started one counts before it
        # has written a step: a storm is caught before the engine gets to it.
        # (Exists, not a join to the steps: that returned a row per step.)
        has_steps = Exists(RemediationStep.objects.filter(remediation=OuterRef("pk")))
        recent = (
            runs.filter(created_at__gte=timezone.now() - window())
            .exclude(status__in=NEVER_ACTED)
            .exclude(Q(status=RunStatus.CANCELLED) & ~has_steps)
            .exclude(trigger=Trigger.ADMIN)
        )
        self.recent = {
            _taken_out(node_id, context)
            for node_id, cluster_id, context in recent.values_list(
                "node_id", "node__cluster_id", "context"
            )
            if cluster_id == self.cluster_id
        }
        self._read = True

    def reason(self, node_id: int) -> tuple[str, str] | None:
        """(partition or "" for cluster-wide, reason) of the limit that is reached, if any."""
        if not self._read:
            self._load()
        for name, partition_id in self.partitions_of.get(node_id, []):
            if name == SPARE_PARTITION:
                continue  # no share of its own (see the module's docstring)
            total, busy = self.totals.get(partition_id, 0), self.busy[partition_id]
            if busy >= partition_cap(total):
                return name, (
                    f"{busy} of {total} nodes in partition {name} are already in "
                    f"remediation ({_partition_limit(total)})"
                )
        if len(self.recent) >= max_nodes():
            minutes = window().total_seconds() / 60
            return CLUSTER_WIDE, (
                f"{len(self.recent)} nodes were taken out automatically in the last "
                f"{minutes:g} min (limit {max_nodes()})"
            )
        return None

    def admit(self, node: Node, *, incident=None, action: str = "") -> str:
        """ "" if automation may drain `node`; otherwise the breaker's reason, with the
        refusal noted (written by `flush`) and counted on the open trip."""
        found = self.reason(node.pk)
        if found is None:
            return ""
        partition, reason = found
        trip = self._open_trip(partition, reason)
        self._refusals.append(
            BreakerRefusal(
                trip=trip, incident=incident, node=node, action=action, reason=reason[:255]
            )
        )
        return reason

    def _open_trip(self, partition: str, reason: str) -> BreakerTrip:
        # A new trip is only noted here and written by `flush`, with its refusals: a trip
        # created at once would be undone by the savepoint of an incident whose decision
        # is abandoned (a refused supersede), leaving refusals that point at nothing and
        # failing every later pass at COMMIT.
        # Only this cluster's trips: another cluster's open trip on a partition of the
        # same name is about other nodes, and must not count this cluster's refusals.
        if self._trips is None:
            self._trips = {}
            mine = BreakerTrip.objects.filter(cluster_id=self.cluster_id, closed_at__isnull=True)
            for trip in mine.order_by("-opened_at"):
                self._trips.setdefault(trip.partition, trip)
        trip = self._trips.get(partition)
        if trip is None:
            trip = BreakerTrip(
                cluster_id=self.cluster_id, partition=partition, reason=reason[:255], suppressed=1
            )
            self._trips[partition] = trip
        elif trip.pk is None:
            trip.suppressed += 1
        else:
            self._suppressed[trip.pk] = self._suppressed.get(trip.pk, 0) + 1
        return trip

    def added(self, run: Remediation) -> None:
        """A run created after the counts were read, by the ledger's holder."""
        if not self._read or run.action not in DRAINING_ACTIONS or run.dry_run:
            return
        part = (run.context or {}).get(PART_KEY)
        for _, partition_id in self.partitions_of.get(run.node_id, []):
            if part is None:
                self.busy[partition_id] += 1
            else:
                self._count_part(partition_id, part)
        if run.status not in NEVER_ACTED and run.trigger != Trigger.ADMIN:
            self.recent.add(_taken_out(run.node_id, run.context))

    def _count_part(self, partition_id: int, part: int) -> None:
        if (partition_id, part) not in self._parts_counted:
            self._parts_counted.add((partition_id, part))
            self.busy[partition_id] = self.busy.get(partition_id, 0) + 1

    def forget(self) -> None:
        """Read the counts again at next use (a run was cancelled or superseded)."""
        self._read = False

    def mark(self) -> LedgerMark:
        """Where the noted refusals stand, to drop those of a decision that failed."""
        return LedgerMark(len(self._refusals), dict(self._suppressed), self._new_trip_counts())

    def drop_since(self, mark: LedgerMark) -> None:
        """Forget what was noted after `mark` (its decision was rolled back), and read the
        counts again, which the rolled-back writes may have changed."""
        del self._refusals[mark.refusals :]
        self._suppressed = dict(mark.suppressed)
        for trip in list((self._trips or {}).values()):
            if trip.pk is not None:
                continue
            if id(trip) in mark.new_trips:
                trip.suppressed = mark.new_trips[id(trip)]
            else:
                del self._trips[trip.partition]
        self.forget()

    def _new_trip_counts(self) -> dict[int, int]:
        return {id(t): t.suppressed for t in (self._trips or {}).values() if t.pk is None}

    def flush(self) -> None:
        """Write the new trips, the noted refusals and the trips' counts, together."""
        for trip in (self._trips or {}).values():
            if trip.pk is None:
                trip.save()
        BreakerRefusal.objects.bulk_create(self._refusals, batch_size=500)
        for trip_pk, count in self._suppressed.items():
            BreakerTrip.objects.filter(pk=trip_pk).update(suppressed=F("suppressed") + count)
        self._refusals, self._suppressed = [], {}


@dataclass(frozen=True)
class LedgerMark:
    refusals: int
    suppressed: dict[int, int]
    new_trips: dict[int, int]


@dataclass(frozen=True)
class BreakerState:
    """For the banner: whether automation is paused, where, and how much it dropped."""

    open: bool
    trips: list[BreakerTrip] = field(default_factory=list)

    @property
    def suppressed(self) -> int:
        return sum(trip.suppressed for trip in self.trips)


def breaker_state(cluster_id: int | None = None) -> BreakerState:
    """Open trips (of one cluster, or of all with None), after closing those whose limit
    is no longer reached."""
    close_recovered_trips()
    trips = BreakerTrip.objects.filter(closed_at__isnull=True).select_related("cluster")
    if cluster_id is not None:
        trips = trips.filter(cluster_id=cluster_id)
    return BreakerState(open=trips.exists(), trips=list(trips.order_by("opened_at")))


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
    """Whether the trip's limit is still reached: counted on its own cluster's runs and
    partition only, so a storm on another cluster neither holds it open nor closes it."""
    runs = _draining_runs().filter(node__cluster_id=trip.cluster_id)
    if trip.partition == CLUSTER_WIDE:
        since = timezone.now() - window()
        recent = runs.filter(created_at__gte=since).exclude(trigger=Trigger.ADMIN)
        return recent.values("node").distinct().count() >= max_nodes()
    if trip.partition == SPARE_PARTITION:
        return False  # a trip opened before the spare partition had no share of its own
    partition = Partition.objects.filter(cluster_id=trip.cluster_id, name=trip.partition).first()
    if partition is None:
        return False  # the partition is gone from its cluster: nothing left to protect
    busy = runs.filter(status__in=[str(s) for s in ACTIVE], node__partitions=partition)
    return busy.values("node").distinct().count() >= partition_cap(partition.nodes.count())


def latest_refusal(node: Node) -> BreakerRefusal | None:
    """The node's latest refusal by a breaker trip that is still open, or None. The
    node page shows it: an admin looking at a red node must see that automation was
    held back, and why, not only the incident's page."""
    refused = BreakerRefusal.objects.filter(node=node, trip__closed_at__isnull=True)
    if not refused.exists():  # the usual case: one indexed query
        return None
    close_recovered_trips()
    return refused.select_related("trip").order_by("-at", "-id").first()


def refused_nodes(limit: int = 10, cluster_id: int | None = None) -> tuple[list, int]:
    """Each node's latest refusal by the open trips, newest first (at most LIMIT), and
    how many nodes they refused in all: what the board's breaker banner lists (of one
    cluster's nodes, or of every cluster's with None)."""
    refused = BreakerRefusal.objects.filter(trip__closed_at__isnull=True)
    if cluster_id is not None:
        refused = refused.filter(node__cluster_id=cluster_id)
    latest = refused.order_by().values("node_id").annotate(last=Max("pk")).values("last")
    rows = BreakerRefusal.objects.filter(pk__in=Subquery(latest)).select_related("node__cluster")
    total = refused.order_by().values("node_id").distinct().count()
    return list(rows.order_by("-pk")[:limit]), total


def fault_count(node: Node) -> int:
    """Critical fault bursts (incidents) on `node` within the flapping window."""
    return fault_counts([node.pk]).get(node.pk, 0)


def fault_counts(node_ids) -> dict[int, int]:
    """`fault_count` of many nodes in one query (nodes without faults left out)."""
    since = timezone.now() - timedelta(hours=flap_window_hours())
    rows = (
        Incident.objects.filter(
            node_id__in=list(node_ids), severity=Severity.CRITICAL, last_event_at__gte=since
        )
        # A job's own fault is not the node's (unless an admin split it as not one fault).
        .exclude(group__kind=FaultGroupKind.JOB, group__split_at__isnull=True)
        .order_by()
        .values("node_id")
        .annotate(faults=Count("pk"))
        .values_list("node_id", "faults")
    )
    return dict(rows)
