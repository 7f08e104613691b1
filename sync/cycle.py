"""One reconciliation cycle: read the snapshot, or record the outage, then apply it."""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from django.db import transaction
from django.utils import timezone

from clusters import drift
from clusters.backends.base import BackendError, ClusterBackend, JobInfo, NodeInfo, PartitionInfo
from clusters.backends.capabilities import RunsSlurmCommands
from clusters.live import publish_banner, publish_nodes
from clusters.models import Cluster
from jobs.live import publish_jobs
from jobs.notifications import notify_jobs_finished
from sync.identity import claim_slurm_name
from sync.jobs import sync_jobs
from sync.nodes import pools_by_partition, sync_nodes, sync_partitions

logger = logging.getLogger("sync")

# Called with (cluster, backend, the snapshot's nodes) after each applied snapshot has
# committed: the remediation app reads admins' requests from the reasons here.
snapshot_listeners: list[Callable[[Cluster, ClusterBackend, list[NodeInfo]], None]] = []


@dataclass
class SyncResult:
    """What one reconciliation cycle changed."""

    nodes_created: int = 0
    nodes_changed: list[int] = field(default_factory=list)
    jobs_created: int = 0
    jobs_changed: list[int] = field(default_factory=list)
    jobs_new: list[int] = field(default_factory=list)
    restarts: list[int] = field(default_factory=list)
    # Jobs that ended this cycle after Slurm had restarted them: their owners are told.
    finished_after_restart: list[int] = field(default_factory=list)
    controller_up: bool = True
    error: str = ""
    partition_drift: dict = field(default_factory=dict)
    reapplied: bool = False


class Snapshot(NamedTuple):
    """Everything one cycle reads from the backend."""

    partitions: list[PartitionInfo]
    nodes: list[NodeInfo]
    jobs: list[JobInfo]


def read_snapshot(backend: ClusterBackend) -> Snapshot:
    return Snapshot(backend.partitions(), backend.nodes(), backend.jobs())


def sync_once(cluster: Cluster, backend: ClusterBackend, *, actor: str = "slurm") -> SyncResult:
    """Read the backend and reconcile; an outage is recorded and nothing else.

    Whatever stops the cycle (an outage, a refusal, a configuration Slurm cannot
    read) is recorded on this cluster's row, in words, and no other's."""
    with collector_paused():
        try:
            result = _sync_once(cluster, backend, actor)
        except BackendError as error:
            record_sync_error(cluster, failure_words(backend, error))
            raise
    if not result.controller_up:
        record_sync_error(cluster, f"Slurm controller unreachable: {result.error}")
    return result


def _sync_once(cluster: Cluster, backend: ClusterBackend, actor: str) -> SyncResult:
    try:
        claim_slurm_name(cluster, backend)
        read_at = timezone.now()
        snapshot = read_snapshot(backend)
        generation = drift.controller_generation(backend)
        restarted = drift.restarted_since(cluster, generation)
        found = drift.detect(
            cluster, backend, snapshot.partitions, snapshot.nodes, restarted=restarted
        )
        edits = drift.person_edits(cluster, snapshot.nodes, restarted)
        reapplied = drift.reapply(cluster, backend, found)
        if reapplied:
            read_at = timezone.now()
            snapshot = read_snapshot(backend)
            found = drift.detect(cluster, backend, snapshot.partitions, snapshot.nodes)
            edits = drift.person_edits(cluster, snapshot.nodes, None)
    except BackendError as error:
        if error.permanent:
            raise
        record_outage(cluster, str(error))
        return SyncResult(controller_up=False, error=str(error))
    result = apply_snapshot(cluster, *snapshot, actor=actor, read_at=read_at)
    drift.save(cluster, found)
    drift.save_edits(cluster, edits, generation)
    result.partition_drift, result.reapplied = found, reapplied
    for listener in list(snapshot_listeners):
        try:
            listener(cluster, backend, snapshot.nodes)
        except Exception:  # a listener's failure must not fail the sync
            logger.exception("Snapshot listener %r failed", listener)
    return result


@contextmanager
def collector_paused():
    """Pause Python's cyclic garbage collector for one sync cycle.

    Slurm's JSON for 5,000 jobs is tens of megabytes: decoding it allocates
    millions of dicts and lists, none of them cyclic, and every few hundred
    allocations the collector walked them all again (over half of the parse
    time). Reference counting still frees them; collection resumes afterwards.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def record_sync_error(cluster: Cluster, message: str) -> None:
    """This cluster's sync failed: why (the latest words) and since when (the first
    failure in a row, kept while the failures go on)."""
    now = timezone.now()
    started = Cluster.objects.filter(pk=cluster.pk, sync_error_since__isnull=True).update(
        sync_error=message, sync_error_since=now
    )
    if not started:
        Cluster.objects.filter(pk=cluster.pk).exclude(sync_error=message).update(sync_error=message)
    cluster.sync_error = message
    cluster.sync_error_since = now if started else cluster.sync_error_since
    if started:
        transaction.on_commit(lambda: publish_banner(cluster.pk))


def failure_words(backend: ClusterBackend, error: BackendError) -> str:
    """ERROR with what usually causes it, where Slurm's own words do not say."""
    if isinstance(backend, RunsSlurmCommands):
        conf = backend.slurm_conf
        if conf and not os.path.exists(conf):
            return f"slurm.conf {conf} does not exist on this host ({error})"
    text = str(error)
    if text.startswith(("slurmrestd 401", "slurmrestd 403")):
        return f"slurmrestd refused Medbay's JWT; check the cluster's JWT key file ({text})"
    return text


def record_outage(cluster: Cluster, message: str) -> None:
    now = timezone.now()
    changed = Cluster.objects.filter(pk=cluster.pk, controller_up=True).update(
        controller_up=False, controller_down_since=now
    )
    if changed:
        logger.warning("Slurm controller unreachable: %s", message)
        cluster.controller_up, cluster.controller_down_since = False, now
        transaction.on_commit(lambda: publish_banner(cluster.pk))


def apply_snapshot(
    cluster: Cluster,
    partitions: list[PartitionInfo],
    nodes: list[NodeInfo],
    jobs: list[JobInfo],
    *,
    actor: str = "slurm",
    now: datetime | None = None,
    read_at: datetime | None = None,
) -> SyncResult:
    """Reconcile a snapshot; READ_AT is when Slurm was read for it (see sync_jobs)."""
    now = now or timezone.now()
    result = SyncResult()
    with transaction.atomic():
        partition_rows = sync_partitions(cluster, partitions)
        pools = pools_by_partition(cluster, partition_rows)
        node_rows = sync_nodes(cluster, nodes, partition_rows, pools, actor, now, result)
        sync_jobs(cluster, jobs, node_rows, actor, now, result, read_at)
        came_back = not cluster.controller_up
        Cluster.objects.filter(pk=cluster.pk).update(
            controller_up=True,
            controller_down_since=None,
            last_sync_at=now,
            sync_error="",
            sync_error_since=None,
        )
        cluster.controller_up, cluster.controller_down_since = True, None
        had_error, cluster.sync_error, cluster.sync_error_since = cluster.sync_error, "", None
        changed_nodes, changed_jobs = list(result.nodes_changed), list(result.jobs_changed)
        new_jobs = list(result.jobs_new)
        transaction.on_commit(lambda: publish_nodes(changed_nodes))
        transaction.on_commit(lambda: publish_jobs(changed_jobs, new_jobs))
        if result.finished_after_restart:
            ended = list(result.finished_after_restart)
            transaction.on_commit(lambda: notify_jobs_finished(ended))
        if came_back or had_error:
            transaction.on_commit(lambda: publish_banner(cluster.pk))
    return result
