"""The demand signals, each a small source behind one interface.

A source reads what it knows about one cluster and returns readings: a figure with its
value, or the same figure without one and the reason (`missing`). A source never
raises for a failure of what it reads (Prometheus down, a Kubernetes API error): a
missing reading is how the policy learns to hold, and the page learns why. Which
sources a cluster has is `sources_for`'s: Slurm's queues always, Prometheus when the
site configured a query, the simulator's own load curve when it has none, Kubernetes
when the fleet is Kubernetes and the workload is named.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from django.conf import settings
from django.db.models import Count, Q

from clusters.backends.base import BackendError, ClusterBackend, FleetProvider
from clusters.backends.capabilities import (
    ReadsExpectedStarts,
    ReportsInferenceDemand,
    ReportsInferenceLoad,
)
from clusters.models import Cluster, Node, NodePool, NodeState, PoolKind
from clusters.status import POOL_FOR_PARTITION
from demand import prometheus
from demand.models import Metric
from jobs.models import Job, JobState

# Slurm's base state, not the board's status: an inference node reads "inference" there.
BUSY_STATES = (NodeState.ALLOCATED, NodeState.MIXED)


@dataclass(frozen=True)
class Reading:
    """One figure as a source read it; `value` None with `missing` saying why."""

    metric: str
    value: float | None
    scope: str = ""
    unit: str = ""
    missing: str = ""


@dataclass
class SourceContext:
    """What a source may look at: the cluster, its backend and fleet, and the moment."""

    cluster: Cluster
    backend: ClusterBackend | None
    fleet: FleetProvider | None
    now: datetime
    _partitions: dict[str, list[str]] = field(default_factory=dict)

    def partitions_of(self, kind: str) -> list[str]:
        """The cluster's partitions whose nodes make up pools of KIND (`train`, `infer`)."""
        if not self._partitions:
            names = self.cluster.partitions.values_list("name", flat=True)
            for name in names:
                self._partitions.setdefault(POOL_FOR_PARTITION.get(name, ""), []).append(name)
            for pool in NodePool.objects.filter(cluster=self.cluster, partition__isnull=False):
                listed = self._partitions.setdefault(pool.kind, [])
                if pool.partition.name not in listed:
                    listed.append(pool.partition.name)
        return sorted(self._partitions.get(kind, []))


class DemandSource(Protocol):
    """Reads some of the demand figures of one cluster."""

    name: str

    def read(self, context: SourceContext) -> list[Reading]: ...


def missing(metrics: Iterable[str], reason: str, scope: str = "") -> list[Reading]:
    return [Reading(metric, None, scope=scope, missing=reason[:255]) for metric in metrics]


# ------------------------------------------------------------------ Slurm: training
TRAINING_METRICS = (
    Metric.TRAINING_PENDING_JOBS,
    Metric.TRAINING_PENDING_NODES,
    Metric.TRAINING_PENDING_GPUS,
    Metric.TRAINING_LONGEST_WAIT_S,
    Metric.TRAINING_EXPECTED_START_S,
)


class SlurmTrainingQueue:
    """What waits in each training partition, from the jobs the sync stored, and when
    Slurm expects the longest-waiting one to start (`squeue --start`)."""

    name = "slurm-training"

    def read(self, context: SourceContext) -> list[Reading]:
        partitions = context.partitions_of(PoolKind.TRAINING)
        if not partitions:
            return missing(TRAINING_METRICS, "the cluster has no training partition")
        starts, why_no_start = _expected_starts(context)
        readings = []
        for partition in partitions:
            pending = list(
                Job.objects.filter(
                    cluster=context.cluster, partition=partition, state=JobState.PENDING
                ).values_list("slurm_id", "node_count", "gpus", "submit_at")
            )
            readings += _queue_readings(partition, pending, starts, why_no_start, context.now)
        return readings


def _expected_starts(context: SourceContext) -> tuple[dict[int, datetime], str]:
    if not isinstance(context.backend, ReadsExpectedStarts):
        return {}, "this backend gives no expected start"
    try:
        return context.backend.expected_starts(), ""
    except BackendError as error:
        return {}, f"squeue --start failed: {error.message}"[:255]


def _queue_readings(partition, pending, starts, why_no_start, now) -> list[Reading]:
    waits = [(now - submit).total_seconds() for _, _, _, submit in pending if submit]
    oldest = min(pending, key=lambda job: job[3] or now, default=None)
    readings = [
        Reading(Metric.TRAINING_PENDING_JOBS, len(pending), scope=partition),
        Reading(Metric.TRAINING_PENDING_NODES, sum(max(n, 1) for _, n, _, _ in pending), partition),
        Reading(Metric.TRAINING_PENDING_GPUS, sum(gpus for _, _, gpus, _ in pending), partition),
        Reading(Metric.TRAINING_LONGEST_WAIT_S, max(max(waits, default=0.0), 0.0), partition),
    ]
    start = starts.get(oldest[0]) if oldest else None
    if start is not None:
        ahead = max((start - now).total_seconds(), 0.0)
        readings.append(Reading(Metric.TRAINING_EXPECTED_START_S, ahead, scope=partition))
    else:
        why = why_no_start or (
            "no training job is pending" if oldest is None else "Slurm has no estimate yet"
        )
        readings.append(
            Reading(Metric.TRAINING_EXPECTED_START_S, None, scope=partition, missing=why)
        )
    return readings


# ------------------------------------------------------------------ Slurm: inference jobs
INFERENCE_QUEUE_METRICS = (
    Metric.INFERENCE_PENDING_JOBS,
    Metric.INFERENCE_PENDING_NODES,
    Metric.INFERENCE_ALLOCATED_NODES,
)


class SlurmInferenceQueue:
    """Inference served as Slurm jobs: the inference partition's queue and allocation."""

    name = "slurm-inference"

    def read(self, context: SourceContext) -> list[Reading]:
        partitions = context.partitions_of(PoolKind.INFERENCE)
        if not partitions:
            return missing(INFERENCE_QUEUE_METRICS, "the cluster has no inference partition")
        readings = []
        for partition in partitions:
            jobs = Job.objects.filter(cluster=context.cluster, partition=partition)
            pending = jobs.filter(state=JobState.PENDING).values_list("node_count", flat=True)
            allocated = (
                Node.objects.filter(cluster=context.cluster, partitions__name=partition)
                .filter(state__in=BUSY_STATES)
                .count()
            )
            readings += [
                Reading(Metric.INFERENCE_PENDING_JOBS, len(pending), scope=partition),
                Reading(Metric.INFERENCE_PENDING_NODES, sum(max(n, 1) for n in pending), partition),
                Reading(Metric.INFERENCE_ALLOCATED_NODES, allocated, scope=partition),
            ]
        return readings


# ------------------------------------------------------------------ the inference load
class PrometheusLoad:
    """The site's PromQL query, read through Prometheus's HTTP API."""

    name = "prometheus"

    def __init__(self, url: str, query: str, unit: str, timeout_s: float = 5.0) -> None:
        self.url, self.query, self.unit, self.timeout_s = url, query, unit, timeout_s

    def read(self, context: SourceContext) -> list[Reading]:
        promql = self.query.replace("{cluster}", context.cluster.name)
        result = prometheus.query_value(self.url, promql, timeout_s=self.timeout_s)
        load = Reading(Metric.INFERENCE_LOAD, result.value, unit=self.unit, missing=result.missing)
        return [load]


class BackendLoad:
    """The load a backend knows itself (the simulator's daily curve), where a site has
    Prometheus."""

    name = "backend-load"

    def read(self, context: SourceContext) -> list[Reading]:
        if not isinstance(context.backend, ReportsInferenceLoad):
            return missing([Metric.INFERENCE_LOAD], "no inference load is configured")
        value, unit = context.backend.inference_load()
        return [Reading(Metric.INFERENCE_LOAD, value, unit=unit)]


class NoLoad:
    """No inference load configured: every sample says so, and the page shows how."""

    name = "no-load"

    def read(self, context: SourceContext) -> list[Reading]:
        return missing(
            [Metric.INFERENCE_LOAD],
            "no inference load is configured (MEDBAY_DEMAND_PROMETHEUS_URL, MEDBAY_DEMAND_PROMQL)",
        )


# ------------------------------------------------------------------ Kubernetes
K8S_METRICS = (Metric.K8S_PENDING_PODS, Metric.K8S_DESIRED_REPLICAS, Metric.K8S_CURRENT_REPLICAS)


class KubernetesInference:
    """Pending inference pods and the replicas the HorizontalPodAutoscaler wants, through
    the Kubernetes fleet driver."""

    name = "kubernetes"

    def __init__(self, namespace: str, selector: str, hpa: str) -> None:
        self.namespace, self.selector, self.hpa = namespace, selector, hpa

    def read(self, context: SourceContext) -> list[Reading]:
        if not isinstance(context.fleet, ReportsInferenceDemand):
            return missing(K8S_METRICS, "the fleet is not Kubernetes")
        try:
            demand = context.fleet.inference_demand(self.namespace, self.selector, self.hpa)
        except BackendError as error:
            return missing(K8S_METRICS, error.message)
        no_hpa = "no HorizontalPodAutoscaler is named (MEDBAY_DEMAND_K8S_HPA)"
        return [
            Reading(Metric.K8S_PENDING_PODS, demand.pending_pods),
            _maybe(Metric.K8S_DESIRED_REPLICAS, demand.desired_replicas, no_hpa),
            _maybe(Metric.K8S_CURRENT_REPLICAS, demand.current_replicas, no_hpa),
        ]


def _maybe(metric: str, value: int | None, why: str) -> Reading:
    return Reading(metric, None, missing=why) if value is None else Reading(metric, value)


# ------------------------------------------------------------------ the pools themselves
class PoolSizes:
    """How many nodes each pool has and how many of them run jobs: the Capacity page's
    pool sizes over time, and what a static split is measured against."""

    name = "pools"

    def read(self, context: SourceContext) -> list[Reading]:
        rows = (
            Node.objects.filter(cluster=context.cluster, pool__isnull=False)
            .values("pool__kind")
            .annotate(total=Count("pk"), busy=Count("pk", filter=Q(state__in=BUSY_STATES)))
            .order_by()
        )
        found = {row["pool__kind"]: row for row in rows}
        readings = []
        for kind in PoolKind.values:
            row = found.get(kind, {"total": 0, "busy": 0})
            readings.append(Reading(Metric.POOL_NODES, row["total"], scope=kind))
            readings.append(Reading(Metric.POOL_BUSY_NODES, row["busy"], scope=kind))
        return readings


def sources_for(backend: ClusterBackend | None, fleet: FleetProvider | None) -> list[DemandSource]:
    """The sources of a cluster with this backend and fleet, as the settings configure them."""
    sources: list[DemandSource] = [SlurmTrainingQueue(), SlurmInferenceQueue(), PoolSizes()]
    if settings.MEDBAY_DEMAND_PROMQL:
        sources.append(
            PrometheusLoad(
                settings.MEDBAY_DEMAND_PROMETHEUS_URL,
                settings.MEDBAY_DEMAND_PROMQL,
                settings.MEDBAY_DEMAND_PROMQL_UNIT,
                settings.MEDBAY_DEMAND_PROMETHEUS_TIMEOUT_S,
            )
        )
    elif isinstance(backend, ReportsInferenceLoad):
        sources.append(BackendLoad())
    else:
        sources.append(NoLoad())
    if settings.MEDBAY_DEMAND_K8S_NAMESPACE and isinstance(fleet, ReportsInferenceDemand):
        sources.append(
            KubernetesInference(
                settings.MEDBAY_DEMAND_K8S_NAMESPACE,
                settings.MEDBAY_DEMAND_K8S_SELECTOR,
                settings.MEDBAY_DEMAND_K8S_HPA,
            )
        )
    return sources
