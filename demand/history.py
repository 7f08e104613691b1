"""Reading the recorded demand back: series for the charts, frames for the replay, the
pools' GPU-hours for the managers, and the hourly rollup that outlives the raw samples.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Avg, Count, Max, Min
from django.db.models.functions import TruncHour

from clusters.models import Cluster, Node
from demand import replay, rules, snapshots
from demand.models import DemandHour, DemandSample, Metric, ReallocationPolicy

MAX_POINTS = 300  # per chart series: a month of minutes would be 43,000
MAX_FRAMES = 2000  # replayed moments: beyond, every k-th pass is replayed


def series(cluster: Cluster, metric: str, start: datetime, end: datetime) -> dict[str, list]:
    """{scope: [(moment, mean value)]} of METRIC, at most MAX_POINTS a scope, averaged
    over equal buckets; passes without a value are left out (a gap, not a zero)."""
    rows = DemandSample.objects.filter(
        cluster=cluster, metric=metric, sampled_at__gte=start, sampled_at__lt=end
    ).exclude(value=None)
    width = max((end - start) / MAX_POINTS, timedelta(seconds=1))
    buckets: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for scope, at, value in rows.values_list("scope", "sampled_at", "value").order_by():
        buckets[scope][int((at - start) / width)].append(value)
    return {
        scope: [(start + index * width, sum(v) / len(v)) for index, v in sorted(found.items())]
        for scope, found in buckets.items()
    }


# ------------------------------------------------------------------ the replay's input
def frames(policy: ReallocationPolicy, start: datetime, end: datetime) -> list[replay.Frame]:
    """The recorded sample passes in [start, end) as the replay's frames: each pass's
    snapshot as the engine built it, and the pair's nodes as the pools' recorded sizes
    and busy counts say (nodes named by pool and number: which node was busy the record
    does not keep, and the replay needs only how many)."""
    moments = list(
        DemandSample.objects.filter(
            cluster_id=policy.cluster_id, sampled_at__gte=start, sampled_at__lt=end
        )
        .values_list("sampled_at", flat=True)
        .distinct()
        .order_by("sampled_at")
    )
    step = max(1, len(moments) // MAX_FRAMES + (len(moments) % MAX_FRAMES > 0))
    found = []
    for at in moments[::step]:
        nodes = _recorded_nodes(policy.cluster_id, at)
        if nodes:
            found.append(replay.Frame(at, snapshots.snapshot_for(policy, at), nodes))
    return found


def _recorded_nodes(cluster_id: int, at: datetime) -> list[rules.NodeState]:
    sizes = {
        (metric, scope): value
        for metric, scope, value in DemandSample.objects.filter(
            cluster_id=cluster_id,
            sampled_at=at,
            metric__in=[Metric.POOL_NODES, Metric.POOL_BUSY_NODES],
        ).values_list("metric", "scope", "value")
    }
    nodes = []
    for pool in rules.Pool:
        total = int(sizes.get((Metric.POOL_NODES, str(pool))) or 0)
        busy = int(sizes.get((Metric.POOL_BUSY_NODES, str(pool))) or 0)
        nodes += [
            rules.NodeState(name=f"{pool}-{index + 1}", pool=pool, busy=index < busy)
            for index in range(total)
        ]
    return nodes


def gpus_per_node(cluster: Cluster) -> int:
    found = Node.objects.filter(cluster=cluster, gpu_count__gt=0).aggregate(gpus=Max("gpu_count"))
    return int(found["gpus"] or 8)


# ------------------------------------------------------------------ the managers' figures
@dataclass
class PoolDay:
    """One day of the pools: GPU-hours each pool held and used, and the utilization of
    the pooled fleet against what the pools' sizes at the period's start would have let
    them use (the static split)."""

    day: str
    held_gpu_h: dict[str, float] = field(default_factory=dict)
    used_gpu_h: dict[str, float] = field(default_factory=dict)
    pooled_pct: float | None = None
    static_pct: float | None = None


POOLS = ("training", "inference")


def pool_days(cluster: Cluster, start: datetime, end: datetime) -> list[PoolDay]:
    """GPU-hours by pool per day from the recorded pool sizes and busy nodes, each pass
    counting until the next. The static split keeps each pool at its size of the first
    pass: a pool using more nodes than that could only have used that many."""
    rows = DemandSample.objects.filter(
        cluster=cluster,
        metric__in=[Metric.POOL_NODES, Metric.POOL_BUSY_NODES],
        scope__in=POOLS,
        sampled_at__gte=start,
        sampled_at__lt=end,
    ).exclude(value=None)
    passes: dict[datetime, dict] = defaultdict(dict)
    for metric, scope, value, at in rows.values_list("metric", "scope", "value", "sampled_at"):
        passes[at][(metric, scope)] = value
    moments = sorted(passes)
    if not moments:
        return []
    gpus = gpus_per_node(cluster)
    static = {pool: passes[moments[0]].get((Metric.POOL_NODES, pool), 0) for pool in POOLS}
    days: dict[str, PoolDay] = {}
    static_used: dict[str, float] = defaultdict(float)
    for at, following in zip(moments, [*moments[1:], None], strict=True):
        hours = ((following or end) - at).total_seconds() / 3600
        hours = min(hours, 1.0)  # a gap in the record (sync stopped) counts an hour at most
        day = days.setdefault(at.date().isoformat(), PoolDay(at.date().isoformat()))
        figures = passes[at]
        for pool in POOLS:
            held = figures.get((Metric.POOL_NODES, pool), 0) * gpus * hours
            used = figures.get((Metric.POOL_BUSY_NODES, pool), 0)
            day.held_gpu_h[pool] = day.held_gpu_h.get(pool, 0.0) + held
            day.used_gpu_h[pool] = day.used_gpu_h.get(pool, 0.0) + used * gpus * hours
            static_used[day.day] += min(used, static[pool]) * gpus * hours
    for day in days.values():
        held = sum(day.held_gpu_h.values())
        if held:
            day.pooled_pct = round(100 * sum(day.used_gpu_h.values()) / held, 1)
            day.static_pct = round(100 * static_used[day.day] / held, 1)
        day.held_gpu_h = {k: round(v, 1) for k, v in day.held_gpu_h.items()}
        day.used_gpu_h = {k: round(v, 1) for k, v in day.used_gpu_h.items()}
    return [days[key] for key in sorted(days)]


# ------------------------------------------------------------------ rollup and pruning
def roll_up(cluster: Cluster, until: datetime) -> int:
    """The cluster's whole hours of samples before UNTIL as DemandHour rows (rewritten,
    so running it again is harmless); returns the hours written."""
    hour_end = until.replace(minute=0, second=0, microsecond=0)
    rows = (
        DemandSample.objects.filter(cluster=cluster, sampled_at__lt=hour_end)
        .annotate(hour=TruncHour("sampled_at"))
        .values("metric", "scope", "hour")
        .annotate(
            mean=Avg("value"),
            low=Min("value"),
            high=Max("value"),
            samples=Count("id"),
            valued=Count("value"),
            unit=Max("unit"),
        )
        .order_by()
    )
    hours = [
        DemandHour(
            cluster=cluster,
            metric=row["metric"],
            scope=row["scope"],
            hour=row["hour"],
            unit=row["unit"] or "",
            mean=row["mean"],
            low=row["low"],
            high=row["high"],
            samples=row["samples"],
            missing=row["samples"] - row["valued"],
        )
        for row in rows
    ]
    with transaction.atomic():
        DemandHour.objects.filter(cluster=cluster, hour__lt=hour_end).delete()
        DemandHour.objects.bulk_create(hours, batch_size=2000)
    return len({row.hour for row in hours})


def prune(cluster: Cluster, cutoff: datetime) -> int:
    """Deletes raw samples before CUTOFF that an hourly rollup already holds."""
    rolled = DemandHour.objects.filter(cluster=cluster).aggregate(last=Max("hour"))["last"]
    if rolled is None:
        return 0
    edge = min(cutoff, rolled + timedelta(hours=1))
    deleted, _ = DemandSample.objects.filter(cluster=cluster, sampled_at__lt=edge).delete()
    return deleted
