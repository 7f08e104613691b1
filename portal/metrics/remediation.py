"""The remediation engine's figures: runs, their ages and durations, steps, breakers,
and the decisions about incidents that failed."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.db.models import Count, DurationField, ExpressionWrapper, F, Max, Q, Sum
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from core import counters
from health.models import Incident
from portal.metrics.families import bound, count_every_choice, histogram, seconds_between
from remediation.admission import FAILED_PASSES
from remediation.models import BreakerTrip, Remediation, RemediationStep
from remediation.transitions import ACTIVE, TERMINAL, RunStatus

# A step is a quick scontrol call or a drain that waits hours for jobs to end.
STEP_BUCKETS_S = (1, 5, 15, 60, 300, 900, 3600, 14400)


class RemediationCollector(Collector):
    def __init__(self, clock):
        self.clock = clock

    def collect(self):
        now = self.clock()
        yield count_every_choice(
            "medbay_remediation_runs",
            "Remediation runs by status.",
            Remediation.objects,
            "status",
            RunStatus,
        )
        yield oldest_run_ages(now)
        yield run_durations()
        yield step_durations()
        yield from breakers()
        yield failed_decisions()
        passes = failed_passes()
        if passes is not None:
            yield passes


def oldest_run_ages(now: datetime) -> GaugeMetricFamily:
    """How long the oldest run in each active status has been in it (0: none is). An
    approval nobody gives, or a run parked in needs_attention, waits for a person."""
    family = GaugeMetricFamily(
        "medbay_remediation_oldest_run_age_seconds",
        "Seconds the oldest run in each active status has been in that status (0: none).",
        labels=["status"],
    )
    entered = _oldest_entry_per_status()
    for status in sorted(ACTIVE):
        since = entered.get(status)
        family.add_metric([status], seconds_between(since, now) if since else 0.0)
    return family


def _oldest_entry_per_status() -> dict[str, datetime]:
    """When each active run entered its status (its latest history row into it), the
    earliest per status. Runs are few: the active ones are at most one per node."""
    rows = (
        Remediation.objects.filter(status__in=ACTIVE)
        .annotate(
            entered=Max("status_changes__at", filter=Q(status_changes__to_status=F("status")))
        )
        .values_list("status", "entered", "created_at")
        .order_by()
    )
    oldest: dict[str, datetime] = {}
    for status, entered, created_at in rows:
        since = entered or created_at
        if status not in oldest or since < oldest[status]:
            oldest[status] = since
    return oldest


def run_durations() -> HistogramMetricFamily:
    rows = Remediation.objects.filter(status__in=TERMINAL, finished_at__isnull=False).values_list(
        "action", "status", "created_at", "finished_at"
    )
    observations: dict[tuple[str, str], list[float]] = defaultdict(list)
    for action, status, created_at, finished_at in rows.order_by():
        observations[(action, status)].append(seconds_between(created_at, finished_at))
    return histogram(
        "medbay_remediation_run_duration_seconds",
        "Time from a run's creation to its end, by action and outcome (its terminal status).",
        ["action", "outcome"],
        observations,
    )


def step_durations() -> HistogramMetricFamily:
    """Finished steps as a histogram per step name, bucketed by the database."""
    family = HistogramMetricFamily(
        "medbay_remediation_step_duration_seconds",
        "Time from a remediation step's start to its finish, by step name.",
        labels=["step"],
    )
    buckets = {
        f"le_{index}": Count("id", filter=Q(duration__lte=timedelta(seconds=upper)))
        for index, upper in enumerate(STEP_BUCKETS_S)
    }
    rows = (
        RemediationStep.objects.filter(finished_at__isnull=False)
        .annotate(
            duration=ExpressionWrapper(
                F("finished_at") - F("started_at"), output_field=DurationField()
            )
        )
        .values("name")
        .annotate(count=Count("id"), total=Sum("duration"), **buckets)
        .order_by("name")
    )
    for row in rows:
        counts = [(bound(upper), row[f"le_{i}"]) for i, upper in enumerate(STEP_BUCKETS_S)]
        total = row["total"] or timedelta(0)
        family.add_metric(
            [row["name"]], [*counts, ("+Inf", row["count"])], max(total.total_seconds(), 0.0)
        )
    return family


def breakers():
    # One series per cluster and scope: two clusters may both have a tripped "train".
    open_trips = list(
        BreakerTrip.objects.filter(closed_at__isnull=True)
        .values_list("cluster__name", "partition")
        .annotate(n=Count("id"))
        .order_by()
    )
    total = GaugeMetricFamily(
        "medbay_breakers_open",
        "Open circuit breakers (automatic remediation paused while any is open).",
        value=sum(n for _, _, n in open_trips),
    )
    by_scope = GaugeMetricFamily(
        "medbay_breaker_open",
        "1 for each cluster and scope (a partition, or the whole cluster) whose breaker is open.",
        labels=["cluster", "scope"],
    )
    for cluster, partition, _ in open_trips:
        by_scope.add_metric([cluster, partition or "cluster"], 1)
    yield total
    yield by_scope


def failed_decisions() -> GaugeMetricFamily:
    """Incidents whose decision raised: retrying with backoff, or given up on (shown in
    the approval queue as undecidable until an admin tries again)."""
    family = GaugeMetricFamily(
        "medbay_incident_decisions_failed",
        "Incidents whose decision pass failed: still retrying, or undecidable.",
        labels=["state"],
    )
    counts = Incident.objects.aggregate(
        retrying=Count(
            "id", filter=Q(decision_due=True, decision_failures__gt=0, decision_error="")
        ),
        undecidable=Count("id", filter=~Q(decision_error="")),
    )
    for state in ("retrying", "undecidable"):
        family.add_metric([state], counts[state])
    return family


def failed_passes() -> CounterMetricFamily | None:
    """Decision passes that failed as a whole (each then decided one incident at a time),
    counted by every process in the shared cache; left out when the cache is down."""
    count = counters.read(FAILED_PASSES)
    if count is None:
        return None
    family = CounterMetricFamily(
        "medbay_decision_passes_failed",
        "Decision passes that failed as a whole and were decided again one incident at a time.",
    )
    family.add_metric([], count)
    return family
