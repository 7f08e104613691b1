"""Prometheus metrics at `/metrics`: the figures an operator alerts on.

Written by hand in the text exposition format (0.0.4), so no client library is
needed. Everything is read from the database at scrape time except the Slurm
command counters: `slurm_sync` and the engine run those commands in other
processes, so each process adds them to the Django cache (Redis in production,
shared by every process) and the web process reads them back.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum
from django.http import HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_safe

from clusters.backends.slurm_cli import SLURM_TOOLS
from clusters.models import Cluster, Gpu, GpuHealth, Node, NodeStatus
from health.models import HealthEvent
from remediation.models import BreakerTrip, Remediation, RemediationStep
from remediation.transitions import RunStatus

logger = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Slurm answers in milliseconds when healthy and in seconds when struggling.
SLURM_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# A step is a quick scontrol call or a drain that waits hours for jobs to end.
STEP_BUCKETS_S = (1, 5, 15, 60, 300, 900, 3600, 14400)
SLURM_KEY = "medbay:metrics:slurm:{tool}:{field}"


@dataclass
class Family:
    """One metric family: its HELP and TYPE lines and its samples."""

    name: str
    kind: str
    help: str
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)

    def add(self, value: float, suffix: str = "", **labels: str) -> None:
        self.samples.append((suffix, labels, value))


def render(families: Iterable[Family]) -> str:
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {family.help}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for suffix, labels, value in family.samples:
            lines.append(f"{family.name}{suffix}{_labels(labels)} {_number(value)}")
    return "\n".join(lines) + "\n"


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{key}="{_escape(value)}"' for key, value in labels.items()) + "}"


def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def _bound(value: float) -> str:
    return _number(value) if not math.isinf(value) else "+Inf"


# ---------------------------------------------------------------- collectors


def collect(now: datetime | None = None) -> list[Family]:
    now = now or timezone.now()
    return [
        health_events(),
        remediation_runs(),
        step_durations(),
        *breakers(),
        *clusters(now),
        nodes_by_status(),
        gpus_by_health(),
        *slurm_commands(),
    ]


def health_events() -> Family:
    family = Family(
        "medbay_health_events_ingested_total",
        "counter",
        "Health events ingested from node agents, repeats included, by kind and severity.",
    )
    rows = (
        HealthEvent.objects.values_list("kind", "severity")
        .annotate(total=Sum("count"))
        .order_by("kind", "severity")
    )
    for kind, severity, total in rows:
        family.add(total or 0, kind=kind, severity=severity)
    return family


def remediation_runs() -> Family:
    family = Family("medbay_remediation_runs", "gauge", "Remediation runs by status.")
    return _count_every_choice(family, Remediation, "status", RunStatus)


def step_durations() -> Family:
    """Finished steps as a histogram per step name, bucketed by the database."""
    family = Family(
        "medbay_remediation_step_duration_seconds",
        "histogram",
        "Time from a remediation step's start to its finish, by step name.",
    )
    buckets = {
        f"le_{index}": Count("id", filter=Q(duration__lte=timedelta(seconds=bound)))
        for index, bound in enumerate(STEP_BUCKETS_S)
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
        for index, bound in enumerate(STEP_BUCKETS_S):
            family.add(row[f"le_{index}"], "_bucket", step=row["name"], le=_bound(bound))
        family.add(row["count"], "_bucket", step=row["name"], le="+Inf")
        total = row["total"] or timedelta(0)
        family.add(max(total.total_seconds(), 0.0), "_sum", step=row["name"])
        family.add(row["count"], "_count", step=row["name"])
    return family


def breakers() -> list[Family]:
    open_trips = list(
        BreakerTrip.objects.filter(closed_at__isnull=True)
        .values_list("partition")
        .annotate(n=Count("id"))
        .order_by()
    )
    total = Family(
        "medbay_breakers_open",
        "gauge",
        "Open circuit breakers (automatic remediation paused while any is open).",
    )
    total.add(sum(n for _, n in open_trips))
    by_scope = Family(
        "medbay_breaker_open",
        "gauge",
        "1 for each scope (a partition, or the whole cluster) whose breaker is open.",
    )
    for partition, _ in open_trips:
        by_scope.add(1, scope=partition or "cluster")
    return [total, by_scope]


def clusters(now: datetime) -> list[Family]:
    lag = Family(
        "medbay_sync_lag_seconds",
        "gauge",
        "Seconds since the cluster was last reconciled from Slurm (+Inf: never).",
    )
    up = Family("medbay_controller_up", "gauge", "1 when the cluster's Slurm controller answers.")
    for name, last_sync_at, controller_up in Cluster.objects.order_by("name").values_list(
        "name", "last_sync_at", "controller_up"
    ):
        # Never synced is infinitely stale, so a `> 60` alert fires for it too.
        seconds = (now - last_sync_at).total_seconds() if last_sync_at else math.inf
        lag.add(max(seconds, 0.0), cluster=name)
        up.add(1 if controller_up else 0, cluster=name)
    return [lag, up]


def nodes_by_status() -> Family:
    family = Family("medbay_nodes", "gauge", "Nodes by the status the board shows.")
    return _count_every_choice(family, Node, "status", NodeStatus)


def gpus_by_health() -> Family:
    family = Family("medbay_gpus", "gauge", "GPUs by health.")
    return _count_every_choice(family, Gpu, "health", GpuHealth)


def _count_every_choice(family: Family, model, field: str, choices) -> Family:
    """One sample per choice of FIELD, zero included, labelled with the field's name."""
    counts = dict(model.objects.values_list(field).annotate(n=Count("id")).order_by())
    for choice in choices:
        family.add(counts.get(choice.value, 0), **{field: choice.value})
    return family


# ---------------------------------------------------------------- Slurm commands


def record_slurm_command(tool: str, seconds: float, failed: bool) -> None:
    """Count one Slurm command in the shared cache (a slurm_cli observer)."""
    tool = tool if tool in SLURM_TOOLS else "other"
    bucket = next(
        (i for i, bound in enumerate(SLURM_BUCKETS_S) if seconds <= bound), len(SLURM_BUCKETS_S)
    )
    _incr(SLURM_KEY.format(tool=tool, field=f"b{bucket}"))
    _incr(SLURM_KEY.format(tool=tool, field="sum_us"), round(seconds * 1_000_000))
    if failed:
        _incr(SLURM_KEY.format(tool=tool, field="errors"))


def _incr(key: str, delta: int = 1) -> None:
    try:
        cache.incr(key, delta)
    except ValueError:
        # First use: add() is atomic, so of two racing processes one creates the
        # key and both increments land.
        cache.add(key, 0, timeout=None)
        cache.incr(key, delta)


def slurm_commands() -> list[Family]:
    tools = (*SLURM_TOOLS, "other")
    fields = [f"b{i}" for i in range(len(SLURM_BUCKETS_S) + 1)] + ["sum_us", "errors"]
    keys = [SLURM_KEY.format(tool=tool, field=name) for tool in tools for name in fields]
    try:
        stored = cache.get_many(keys)
    except Exception:  # Redis down: scrape the database figures rather than fail with a 500
        logger.warning("Slurm command metrics left out: the cache is unreachable", exc_info=True)
        return []
    latency = Family(
        "medbay_slurm_command_duration_seconds",
        "histogram",
        "Wall time of Slurm CLI commands run by any Medbay process, by tool.",
    )
    errors = Family(
        "medbay_slurm_command_errors_total",
        "counter",
        "Slurm CLI commands that exited non-zero, timed out or were missing, by tool.",
    )
    for tool in tools:
        value = {name: stored.get(SLURM_KEY.format(tool=tool, field=name), 0) for name in fields}
        counts = [value[f"b{i}"] for i in range(len(SLURM_BUCKETS_S) + 1)]
        if not any(counts):
            continue
        running = 0
        for bound, count in zip(SLURM_BUCKETS_S, counts, strict=False):
            running += count
            latency.add(running, "_bucket", command=tool, le=_bound(bound))
        latency.add(sum(counts), "_bucket", command=tool, le="+Inf")
        latency.add(value["sum_us"] / 1_000_000, "_sum", command=tool)
        latency.add(sum(counts), "_count", command=tool)
        errors.add(value["errors"], command=tool)
    return [latency, errors]


# ---------------------------------------------------------------- access and view


def client_allowed(request) -> bool:
    """From an address in MEDBAY_METRICS_ALLOW, or with the MEDBAY_METRICS_TOKEN bearer."""
    token = settings.MEDBAY_METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if token and header.startswith("Bearer "):
        return hmac.compare_digest(header.removeprefix("Bearer ").strip(), token)
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return any(
        address in ipaddress.ip_network(entry, strict=False)
        for entry in settings.MEDBAY_METRICS_ALLOW
    )


@require_safe
def metrics_view(request):
    if not client_allowed(request):
        return HttpResponse(
            "Metrics are served to addresses in MEDBAY_METRICS_ALLOW, "
            "or with the MEDBAY_METRICS_TOKEN bearer token.\n",
            status=403,
            content_type="text/plain; charset=utf-8",
        )
    return HttpResponse(render(collect()), content_type=CONTENT_TYPE)
