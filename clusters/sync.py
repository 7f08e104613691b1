"""Reconciles what the backend reports into the database, in bulk.

One cycle reads the whole snapshot, diffs it against the rows in a constant
number of queries, writes history rows only for real changes and publishes the
changed nodes and jobs after the transaction commits. A failed read changes
nothing: an unreachable controller is recorded as an outage, never read as
"every node is gone" (the Slinky operator once killed jobs that way).
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import operator
import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NamedTuple

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import BigIntegerField, F, Func, Lookup, Q, TextField, Value
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone

from clusters import drift, holders
from clusters.backends.base import BackendError, ClusterBackend, JobInfo, NodeInfo, PartitionInfo
from clusters.live import publish_banner, publish_nodes
from clusters.models import Cluster, Gpu, Node, NodePool, NodeStateChange, NodeStatus, Partition
from clusters.status import POOL_FOR_PARTITION, board_status
from jobs.live import publish_jobs
from jobs.models import ACTIVE_JOB_STATES, Job, JobState, JobStateChange

logger = logging.getLogger(__name__)

NODE_FIELDS = (
    "state",
    "flags",
    "status",
    "reason",
    "reason_set_by",
    "reason_set_at",
    "held_by",
    "pool_id",
    "partition_names",
    "cpus",
    "memory_mb",
    "gpu_count",
    "gpus_used",
)
JOB_FIELDS = (
    "name",
    "user",
    "account",
    "partition",
    "state",
    "reason",
    "node_names",
    "node_count",
    "gpus",
    "start_at",
    "end_at",
    "eligible_at",
    "restart_count",
    "requeue",
    "exit_code",
    "time_limit_minutes",
)
SEEN_RESOLUTION = timedelta(seconds=30)
# A node handed over for repair shows "in repair" while Slurm keeps it out of service.
REPAIRABLE = frozenset({NodeStatus.FAIL, NodeStatus.DOWN, NodeStatus.DRAINED})
VANISHED_REASON = "no longer reported by Slurm (see sacct for the outcome)"
# `JobState.values` builds a new list on every access; the sync asks once per job.
KNOWN_JOB_STATES = frozenset(JobState.values)
# Slurm prints an estimate as StartTime while a job waits and the time limit's
# end as EndTime while it runs; only a started or ended job has real ones.
NOT_YET_STARTED = frozenset({JobState.PENDING, JobState.REQUEUED})
NOT_YET_ENDED = NOT_YET_STARTED | {JobState.RUNNING, JobState.SUSPENDED, JobState.CONFIGURING}


@dataclass
class SyncResult:
    """What one reconciliation cycle changed."""

    nodes_created: int = 0
    nodes_changed: list[int] = field(default_factory=list)
    jobs_created: int = 0
    jobs_changed: list[int] = field(default_factory=list)
    jobs_new: list[int] = field(default_factory=list)
    restarts: list[int] = field(default_factory=list)
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
    """Read the backend and reconcile; an outage is recorded and nothing else."""
    with collector_paused():
        return _sync_once(cluster, backend, actor)


def _sync_once(cluster: Cluster, backend: ClusterBackend, actor: str) -> SyncResult:
    try:
        snapshot = read_snapshot(backend)
        generation = drift.controller_generation(backend)
        restarted = drift.restarted_since(cluster, generation)
        found = drift.detect(
            cluster, backend, snapshot.partitions, snapshot.nodes, restarted=restarted
        )
        edits = drift.person_edits(cluster, snapshot.nodes, restarted)
        reapplied = drift.reapply(cluster, backend, found)
        if reapplied:
            snapshot = read_snapshot(backend)
            found = drift.detect(cluster, backend, snapshot.partitions, snapshot.nodes)
            edits = drift.person_edits(cluster, snapshot.nodes, None)
    except BackendError as error:
        if error.permanent:
            raise
        record_outage(cluster, str(error))
        return SyncResult(controller_up=False, error=str(error))
    result = apply_snapshot(cluster, *snapshot, actor=actor)
    drift.save(cluster, found)
    drift.save_edits(cluster, edits, generation)
    result.partition_drift, result.reapplied = found, reapplied
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
) -> SyncResult:
    now = now or timezone.now()
    result = SyncResult()
    with transaction.atomic():
        partition_rows = _sync_partitions(cluster, partitions)
        pools = _pools_by_partition(cluster, partition_rows)
        node_rows = _sync_nodes(cluster, nodes, partition_rows, pools, actor, now, result)
        _sync_jobs(cluster, jobs, node_rows, actor, now, result)
        came_back = not cluster.controller_up
        Cluster.objects.filter(pk=cluster.pk).update(
            controller_up=True, controller_down_since=None, last_sync_at=now
        )
        cluster.controller_up, cluster.controller_down_since = True, None
        changed_nodes, changed_jobs = list(result.nodes_changed), list(result.jobs_changed)
        new_jobs = list(result.jobs_new)
        transaction.on_commit(lambda: publish_nodes(changed_nodes))
        transaction.on_commit(lambda: publish_jobs(changed_jobs, new_jobs))
        if came_back:
            transaction.on_commit(lambda: publish_banner(cluster.pk))
    return result


def _sync_partitions(cluster: Cluster, partitions: list[PartitionInfo]) -> dict[str, Partition]:
    rows = {p.name: p for p in Partition.objects.filter(cluster=cluster)}
    new, changed = [], []
    for info in partitions:
        row = rows.get(info.name)
        if row is None:
            new.append(
                Partition(
                    cluster=cluster,
                    name=info.name,
                    max_time_minutes=info.max_time_minutes,
                    max_nodes=info.max_nodes,
                    is_default=info.default,
                )
            )
            continue
        values = (info.max_time_minutes, info.max_nodes, info.default)
        if (row.max_time_minutes, row.max_nodes, row.is_default) != values:
            row.max_time_minutes, row.max_nodes, row.is_default = values
            changed.append(row)
    if new:
        for row in Partition.objects.bulk_create(new):
            rows[row.name] = row
    if changed:
        Partition.objects.bulk_update(changed, ["max_time_minutes", "max_nodes", "is_default"])
    return rows


def _pools_by_partition(cluster: Cluster, partitions: dict[str, Partition]) -> dict[str, NodePool]:
    pools = {pool.name: pool for pool in NodePool.objects.filter(cluster=cluster)}
    by_partition: dict[str, NodePool] = {}
    missing = []
    for name, partition in partitions.items():
        kind = POOL_FOR_PARTITION.get(name)
        if kind is None:
            continue
        pool = pools.get(kind)
        if pool is None:
            pool = NodePool(cluster=cluster, name=kind, kind=kind, partition=partition)
            pools[kind] = pool
            missing.append(pool)
        by_partition[name] = pool
    if missing:
        NodePool.objects.bulk_create(missing)
    return by_partition


def _pool_for(info: NodeInfo, pools: dict[str, NodePool]) -> NodePool | None:
    for partition in info.partitions:
        if partition in pools:
            return pools[partition]
    return None


def _node_values(
    info: NodeInfo, pool: NodePool | None, remediation: str, in_repair: bool = False
) -> tuple:
    """The NODE_FIELDS of a node as the snapshot reports it, in that order."""
    status = board_status(info.state, info.flags, pool.kind if pool else None, remediation)
    if in_repair and status in REPAIRABLE:
        status = NodeStatus.IN_REPAIR
    return (
        info.state,
        ",".join(sorted(info.flags)),
        status,
        info.reason[:512],
        info.reason_set_by[:64],
        info.reason_set_at,
        holders.describe(holders.other_holders(info))[:255],
        # The id, not the object: comparing `row.pool` would load each node's pool.
        pool.pk if pool else None,
        ",".join(info.partitions),
        info.cpus,
        info.memory_mb,
        info.gpus,
        info.gpus_used,
    )


def _stored_nodes(cluster: Cluster) -> dict[str, tuple[int, str, bool, tuple]]:
    """name -> (pk, active remediation, in repair, NODE_FIELDS values): plain tuples."""
    rows = Node.objects.filter(cluster=cluster).values_list(
        "name", "pk", "active_remediation", "in_repair_since", *NODE_FIELDS
    )
    return {
        name: (pk, remediation, repair is not None, tuple(values))
        for name, pk, remediation, repair, *values in rows
    }


def _sync_nodes(cluster, infos, partition_rows, pools, actor, now, result) -> dict[str, int]:
    """Reconcile nodes; returns name -> primary key of every node of the cluster."""
    stored = _stored_nodes(cluster)
    new_nodes, changed, history = [], [], []
    changed_fields: set[str] = set()
    for info in infos:
        pool = _pool_for(info, pools)
        old = stored.get(info.name)
        values = _node_values(info, pool, old[1] if old else "", bool(old and old[2]))
        fields = dict(zip(NODE_FIELDS, values, strict=True))
        if old is None:
            row = Node(cluster=cluster, name=info.name, last_seen_at=now, updated_at=now, **fields)
            new_nodes.append(row)
            continue
        if old[3] == values:
            continue
        row = Node(pk=old[0], cluster=cluster, name=info.name, updated_at=now, **fields)
        changed.append(row)
        changed_fields.update(
            name
            for name, was, now_is in zip(NODE_FIELDS, old[3], values, strict=True)
            if was != now_is
        )
        old_status = old[3][NODE_FIELDS.index("status")]
        if old_status != row.status:
            history.append(_node_change(row, old_status, actor, now))
    ids = {name: old[0] for name, old in stored.items()}
    if new_nodes:
        created = Node.objects.bulk_create(new_nodes)
        for row in created:
            ids[row.name] = row.pk
            history.append(_node_change(row, "", actor, now))
        models_by_name = {info.name: info.gpu_model for info in infos}
        Gpu.objects.bulk_create(
            Gpu(
                node=row,
                index=index,
                model=models_by_name.get(row.name, ""),
                pci_bus_id=default_pci_bus_id(row.gpu_count, index),
            )
            for row in created
            for index in range(row.gpu_count)
        )
        result.nodes_created = len(created)
    # Only the columns that changed somewhere: the write's cost grows with rows x columns.
    fields = [name for name in NODE_FIELDS if name in changed_fields]
    bulk_write(Node, changed, [*fields, "updated_at"])
    _mark_seen(cluster, [stored[info.name][0] for info in infos if info.name in stored], now)
    NodeStateChange.objects.bulk_create(history)
    _sync_node_partitions(ids, infos, partition_rows, [*new_nodes, *changed])
    result.nodes_changed = [row.pk for row in [*new_nodes, *changed]]
    return ids


class EqualsAny(Lookup):
    """`lhs = ANY(%s)` with the values as one PostgreSQL array parameter: as an IN
    list, 5,000 job ids cost more to send and plan than the query did to run."""

    lookup_name = "equals_any"
    prepare_rhs = False

    def as_sql(self, compiler, connection):
        lhs, params = self.process_lhs(compiler, connection)
        return f"{lhs} = ANY(%s)", [*params, list(self.rhs)]


def _one_of(field: str, values: list) -> Q:
    """FIELD is one of VALUES: one array parameter on PostgreSQL, an IN list elsewhere."""
    if connection.vendor == "postgresql":
        return Q(EqualsAny(F(field), values))
    return Q(**{f"{field}__in": values})


def _mark_seen(cluster: Cluster, node_ids: list[int], now: datetime) -> None:
    """One statement for every node Slurm still reports, changed or not.

    Rewriting every node's row on every cycle (every few seconds) only made
    PostgreSQL churn through dead tuples and WAL; a row is rewritten once its
    last sighting is SEEN_RESOLUTION old, so "last seen" is exact to that.
    """
    if node_ids:
        rows = Node.objects.filter(_one_of("pk", node_ids), cluster=cluster)
        stale = Q(last_seen_at__isnull=True) | Q(last_seen_at__lte=now - SEEN_RESOLUTION)
        rows.filter(stale).update(last_seen_at=now)


def bulk_write(model, rows: list, fields: list[str]) -> None:
    """Write FIELDS of saved ROWS in one statement.

    Django's `bulk_update` builds one `CASE WHEN id = ... THEN ...` per column,
    which PostgreSQL evaluates row by row and Django takes long to compile; on
    PostgreSQL an `UPDATE ... FROM (VALUES ...)` join does the same in one pass.
    """
    if not rows or not fields:
        return
    if connection.vendor != "postgresql":
        model.objects.bulk_update(rows, fields)
        return
    meta = model._meta
    columns = [meta.get_field(name) for name in fields]
    quote = connection.ops.quote_name
    assignments = ", ".join(
        f"{quote(field.column)} = v.{quote(field.column)}::{field.db_type(connection)}"
        for field in columns
    )
    aliases = ", ".join(quote(field.column) for field in [meta.pk, *columns])
    row_sql = "(" + ", ".join(["%s"] * (len(columns) + 1)) + ")"
    params = []
    for row in rows:
        params.append(row.pk)
        params.extend(
            field.get_db_prep_save(getattr(row, field.attname), connection) for field in columns
        )
    table, pk = quote(meta.db_table), quote(meta.pk.column)
    # Only quoted names from the model's metadata are formatted in; values are parameters.
    values_sql = ", ".join([row_sql] * len(rows))
    sql = f"UPDATE {table} SET {assignments} FROM (VALUES {values_sql}) AS v({aliases})"  # noqa: S608
    sql += f" WHERE {table}.{pk} = v.{pk}"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


# Bus addresses of the eight GPUs of an HGX/DGX H100 board. Until an agent
# reports the real inventory they let kernel-log XIDs (which name only the PCI
# address) find their GPU.
HGX_8_GPU_BUS_IDS = (
    "0000:18:00", "0000:2a:00", "0000:3a:00", "0000:5d:00",
    "0000:9a:00", "0000:ab:00", "0000:ba:00", "0000:db:00",
)  # fmt: skip


def default_pci_bus_id(gpu_count: int, index: int) -> str:
    return HGX_8_GPU_BUS_IDS[index] if gpu_count == 8 else ""


def _node_change(row: Node, old_status: str, actor: str, now: datetime) -> NodeStateChange:
    return NodeStateChange(
        node=row,
        from_status=old_status,
        to_status=row.status,
        reason=row.reason,
        actor=actor,
        at=now,
    )


def _sync_node_partitions(ids, infos, partition_rows, touched) -> None:
    """Rewrite partition links only for nodes whose partition list changed."""
    touched_names = {row.name for row in touched}
    if not touched_names:
        return
    through = Node.partitions.through
    node_ids = [ids[info.name] for info in infos if info.name in touched_names]
    through.objects.filter(node_id__in=node_ids).delete()
    through.objects.bulk_create(
        through(node_id=ids[info.name], partition_id=partition_rows[name].pk)
        for info in infos
        if info.name in touched_names
        for name in info.partitions
        if name in partition_rows
    )


def _job_values(info: JobInfo) -> dict:
    """The synced columns. Submit time is not one: Slurm resets SubmitTime on a
    requeue, and the job's submission is the first one Medbay saw."""
    state = info.state if info.state in KNOWN_JOB_STATES else JobState.PENDING
    return {
        "name": info.name[:255],
        "user": info.user,
        "account": info.account,
        "partition": info.partition,
        "state": state,
        "reason": (info.reason or "")[:255],
        "node_names": list(info.nodes),
        "node_count": info.node_count,
        "gpus": info.gpus,
        "start_at": None if state in NOT_YET_STARTED else info.start_time,
        "end_at": None if state in NOT_YET_ENDED else info.end_time,
        "eligible_at": info.eligible_time,
        "restart_count": info.restart_count,
        "requeue": info.requeue,
        "exit_code": info.exit_code,
        "time_limit_minutes": info.time_limit_minutes,
    }


def _sync_jobs(cluster, infos, node_ids, actor, now, result) -> None:
    seen = {info.job_id: info for info in infos}
    stored = _stored_jobs(cluster, list(seen))
    _retire_reused_ids(seen, stored)
    job_key = _job_key_function()
    new_jobs, candidates = [], []
    for job_id, info in seen.items():
        values = _job_values(info)
        old = stored.get(job_id)
        if old is None:
            new_jobs.append(
                Job(
                    cluster=cluster,
                    slurm_id=job_id,
                    submit_at=info.submit_time,
                    updated_at=now,
                    **values,
                )
            )
        elif old.key != job_key(values):
            candidates.append((job_id, old.pk, values))
    changed, history, changed_fields = [], [], set()
    stored_values = _stored_job_values([pk for _, pk, _ in candidates])
    for job_id, pk, values in candidates:
        was = stored_values[pk]
        differs = [name for name in JOB_FIELDS if was[name] != values[name]]
        if not differs:
            continue
        row = Job(pk=pk, cluster=cluster, slurm_id=job_id, updated_at=now, **values)
        _record_job_change(row, was, actor, now, history, result)
        changed.append(row)
        changed_fields.update(differs)
    vanished = []
    for job_id, old in stored.items():
        if job_id in seen or old.state not in ACTIVE_JOB_STATES:
            continue
        row = Job(pk=old.pk, cluster=cluster, slurm_id=job_id, state=old.state)
        row.restart_count = old.restart_count
        history.append(_job_change(row, JobState.COMPLETED, VANISHED_REASON, actor, now))
        row.state, row.reason, row.node_names = JobState.COMPLETED, VANISHED_REASON, []
        vanished.append(row)
    if new_jobs:
        for row in Job.objects.bulk_create(new_jobs):
            history.append(_job_change(row, row.state, row.reason, actor, now, from_state=""))
        result.jobs_created = len(new_jobs)
    fields = [name for name in JOB_FIELDS if name in changed_fields]
    bulk_write(Job, changed, [*fields, "updated_at"])
    _complete_vanished(vanished, now)
    JobStateChange.objects.bulk_create(history)
    _sync_job_nodes([*new_jobs, *changed, *vanished], node_ids)
    result.jobs_changed = [row.pk for row in [*new_jobs, *changed, *vanished]]
    result.jobs_new = [row.pk for row in new_jobs]


def _retire_reused_ids(seen: dict[int, JobInfo], stored: dict[int, StoredJob]) -> None:
    """A finished job whose id Slurm now gives to a live job that was not requeued
    (its restart count did not go up) is another job: the old row keeps its
    history and the new job gets a row of its own (Slurm reuses ids)."""
    reused = [
        job_id
        for job_id, old in stored.items()
        if old.state not in ACTIVE_JOB_STATES
        and job_id in seen
        and seen[job_id].state in ACTIVE_JOB_STATES
        and seen[job_id].restart_count <= old.restart_count
    ]
    if reused:
        Job.objects.filter(pk__in=[stored[job_id].pk for job_id in reused]).update(superseded=True)
        for job_id in reused:
            del stored[job_id]


def _complete_vanished(rows: list[Job], now: datetime) -> None:
    """Active jobs Slurm no longer lists; their end time is kept when Slurm gave one."""
    if rows:
        Job.objects.filter(pk__in=[row.pk for row in rows]).update(
            state=JobState.COMPLETED,
            reason=VANISHED_REASON,
            updated_at=now,
            end_at=Coalesce("end_at", Value(now)),
        )


class StoredJob(NamedTuple):
    """What the diff needs of a stored job: KEY tells whether it changed at all."""

    pk: int
    state: str
    restart_count: int
    key: object


def _stored_jobs(cluster: Cluster, job_ids: list[int]) -> dict[int, StoredJob]:
    """slurm_id -> StoredJob for the jobs this snapshot may touch.

    Thousands of jobs are compared every cycle and few change. On PostgreSQL
    each row comes back as one digest of its synced columns, which
    _job_key_function() computes the same way from Slurm's values: decoding
    every column of every job cost more than the rest of the diff.
    """
    listed = _one_of("slurm_id", job_ids)
    rows = Job.objects.filter(
        Q(state__in=ACTIVE_JOB_STATES) | listed, cluster=cluster, superseded=False
    )
    if connection.vendor == "postgresql":
        rows = rows.annotate(sync_key=_job_digest_expression()).values_list(
            "pk", "slurm_id", "state", "restart_count", "sync_key"
        )
        return {slurm_id: StoredJob(pk, *rest) for pk, slurm_id, *rest in rows}
    rows = rows.values_list("pk", "slurm_id", *JOB_FIELDS)
    state_at, restarts_at = JOB_FIELDS.index("state"), JOB_FIELDS.index("restart_count")
    return {
        slurm_id: StoredJob(pk, values[state_at], values[restarts_at], tuple(values))
        for pk, slurm_id, *values in rows
    }


def _stored_job_values(pks: list[int]) -> dict[int, dict]:
    """pk -> JOB_FIELDS values of the jobs whose key differed."""
    if not pks:
        return {}
    rows = Job.objects.filter(pk__in=pks).values_list("pk", *JOB_FIELDS)
    return {pk: dict(zip(JOB_FIELDS, values, strict=True)) for pk, *values in rows}


# How each synced column is written into the digest, in PostgreSQL and in Python.
# Nullable columns print NULL as \N so that it differs from an empty value.
DIGEST_FORMS = {
    "node_names": "json",
    "node_count": "int",
    "gpus": "int",
    "start_at": "time",
    "end_at": "time",
    "eligible_at": "time",
    "restart_count": "int",
    "requeue": "bool",
    "exit_code": "nullable_int",
    "time_limit_minutes": "nullable_int",
}
# A job name may hold any printable character; the unit separator is not one.
DIGEST_SEPARATOR = "\x1f"
NULL_MARK = "\\N"
PLAIN_HOST_NAMES = re.compile(r"[A-Za-z0-9._,-]*")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ONE_MICROSECOND = timedelta(microseconds=1)


class EpochMicroseconds(Func):
    """A timestamp as integer microseconds since the epoch (exact, unlike a float)."""

    output_field = BigIntegerField()
    template = "CAST(EXTRACT(EPOCH FROM %(expressions)s) * 1000000 AS bigint)"


def _job_digest_expression() -> Func:
    """md5 of the synced columns as text, joined by DIGEST_SEPARATOR (PostgreSQL)."""
    columns = []
    for name in JOB_FIELDS:
        form = DIGEST_FORMS.get(name, "text")
        column = EpochMicroseconds(name) if form == "time" else F(name)
        if form != "text":
            column = Cast(column, TextField())
        if form in ("time", "nullable_int"):
            column = Coalesce(column, Value(NULL_MARK))
        columns.append(column)
    joined = Func(Value(DIGEST_SEPARATOR), *columns, function="concat_ws")
    return Func(joined, function="md5", output_field=TextField())


def _digest_nodes(names: list[str]) -> str:
    """The list as jsonb prints it; host names need no escaping, so skip json.dumps."""
    if not names:
        return "[]"
    if PLAIN_HOST_NAMES.fullmatch(",".join(names)):
        return '["' + '", "'.join(names) + '"]'
    return json.dumps(names, ensure_ascii=False)


def _job_key_function():
    """A function from _job_values() to the key _stored_jobs() holds for the same job."""
    if connection.vendor != "postgresql":
        return lambda values: tuple(values[name] for name in JOB_FIELDS)
    read_all = operator.itemgetter(*JOB_FIELDS)
    at = {form: [] for form in ("json", "time", "bool", "nullable_int")}
    for index, name in enumerate(JOB_FIELDS):
        at.get(DIGEST_FORMS.get(name, "text"), []).append(index)
    (nodes_at,), (requeue_at,) = at["json"], at["bool"]
    times_at, nullable_at = at["time"], at["time"] + at["nullable_int"]

    # Thousands of jobs a cycle: the special columns are patched in place, and
    # everything else (text and integers) is printed by str().
    def digest(values: dict) -> str:
        parts = list(read_all(values))
        parts[nodes_at] = _digest_nodes(parts[nodes_at])
        parts[requeue_at] = "true" if parts[requeue_at] else "false"
        for index in times_at:
            if parts[index] is not None:
                parts[index] = (parts[index] - EPOCH) // ONE_MICROSECOND
        for index in nullable_at:
            if parts[index] is None:
                parts[index] = NULL_MARK
        text = DIGEST_SEPARATOR.join(map(str, parts))
        return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()

    return digest


def _record_job_change(row: Job, was: dict, actor, now, history, result) -> None:
    """History rows for ROW, which now holds the snapshot's values; WAS, the stored ones.

    A restart is Slurm's restart count going up, and only that: a requeued job
    passes through PENDING, COMPLETING and PENDING again, which is one restart.
    Its row keeps the nodes the job ran on, which the requeue took away.
    """
    old_state = was["state"]
    if row.restart_count > was["restart_count"]:
        result.restarts.append(row.slurm_id)
        reason = f"requeued (restart {row.restart_count})"
        history.append(
            _job_change(
                row, JobState.PENDING, reason, actor, now,
                from_state=old_state, nodes=was["node_names"] or row.node_names,
            )
        )  # fmt: skip
        if row.state != JobState.PENDING:
            history.append(
                _job_change(row, row.state, row.reason, actor, now, from_state=JobState.PENDING)
            )
    elif old_state != row.state:
        history.append(_job_change(row, row.state, row.reason, actor, now, from_state=old_state))


def _job_change(
    row, to_state, reason, actor, now, *, from_state=None, nodes=None
) -> JobStateChange:
    return JobStateChange(
        job=row,
        from_state=row.state if from_state is None else from_state,
        to_state=to_state,
        reason=(reason or "")[:255],
        actor=actor,
        restart_count=row.restart_count,
        node_names=list(row.node_names if nodes is None else nodes),
        at=now,
    )


def _sync_job_nodes(touched: list[Job], node_ids: dict[str, int]) -> None:
    if not touched:
        return
    through = Job.nodes.through
    job_ids = [row.pk for row in touched]
    through.objects.filter(job_id__in=job_ids).delete()
    through.objects.bulk_create(
        through(job_id=row.pk, node_id=node_ids[name])
        for row in touched
        if row.state in (JobState.RUNNING, JobState.COMPLETING, JobState.SUSPENDED)
        for name in row.node_names
        if name in node_ids
    )


# ---------------------------------------------------------------- the polling loop

DEFAULT_CLUSTER_NAME = "slurm"
BACKOFF_FIRST_S = 2.0
BACKOFF_MAX_S = 30.0
CONFIG_VALUE = re.compile(r"^\s*(ClusterName|SLURM_VERSION)\s*=\s*(\S+)", re.MULTILINE)
CONF_CLUSTER_NAME = re.compile(r"^\s*ClusterName\s*=\s*(\S+)", re.MULTILINE | re.IGNORECASE)
VERSION_NUMBER = re.compile(r"\d+\.\d+(?:\.\d+)?")


class SlurmIdentity(NamedTuple):
    """The cluster's name and the installed Slurm version ("" when unknown)."""

    name: str
    version: str


def slurm_identity(backend: ClusterBackend) -> SlurmIdentity:
    """Name and version from `scontrol show config`; while the controller is
    down, from slurm.conf and `sinfo --version`, which need no controller."""
    run = getattr(backend, "run", None)
    if run is None:
        return SlurmIdentity(DEFAULT_CLUSTER_NAME, "")
    try:
        values = dict(CONFIG_VALUE.findall(run(["scontrol", "show", "config"])))
    except BackendError:
        values = {}
    name = values.get("ClusterName") or _conf_cluster_name(backend) or DEFAULT_CLUSTER_NAME
    return SlurmIdentity(name, values.get("SLURM_VERSION") or _installed_version(run))


def _conf_cluster_name(backend: ClusterBackend) -> str:
    path = Path(getattr(backend, "slurm_conf", "") or "/etc/slurm/slurm.conf")
    try:
        match = CONF_CLUSTER_NAME.search(path.read_text())
    except OSError:
        return ""
    return match.group(1) if match else ""


def _installed_version(run) -> str:
    try:
        match = VERSION_NUMBER.search(run(["sinfo", "--version"]))
    except BackendError:
        return ""
    return match.group(0) if match else ""


def ensure_cluster(backend: ClusterBackend, name: str | None = None) -> Cluster:
    """The Cluster row for this backend, created on first use, with its Slurm version."""
    identity = slurm_identity(backend)
    cluster, _ = Cluster.objects.get_or_create(
        name=name or identity.name, defaults={"backend": backend.name}
    )
    updates = {"backend": backend.name}
    if identity.version:
        updates["slurm_version"] = identity.version
    if any(getattr(cluster, key) != value for key, value in updates.items()):
        Cluster.objects.filter(pk=cluster.pk).update(**updates)
        for key, value in updates.items():
            setattr(cluster, key, value)
    return cluster


def backoff_delay(failures: int) -> float:
    """2, 4, 8, 16, 30, 30 ... seconds after 1, 2, 3 ... failed cycles in a row."""
    return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** max(failures - 1, 0))


class SyncLoop:
    """Polls the backend and reconciles, backing off while Slurm is unreachable.

    An outage only delays the next poll: sync_once records it and changes no
    node or job, so a controller restart can never read as "every node is gone".
    """

    def __init__(
        self,
        cluster: Cluster,
        backend: ClusterBackend,
        *,
        interval_s: float | None = None,
        actor: str = "slurm",
    ) -> None:
        self.cluster = cluster
        self.backend = backend
        self.interval_s = settings.MEDBAY_SYNC_INTERVAL_S if interval_s is None else interval_s
        self.actor = actor
        self.failures = 0
        self._stop = threading.Event()

    def cycle(self) -> float:
        """One reconciliation; returns how many seconds to wait before the next."""
        try:
            result = sync_once(self.cluster, self.backend, actor=self.actor)
        except BackendError as error:
            # Slurm refused a read (bad output, a killed command): say what, no traceback.
            logger.error("Sync of cluster %s failed: %s", self.cluster.name, error)
            result = SyncResult(controller_up=False)
        except Exception:  # a database hiccup must not end the loop either
            logger.exception("Sync of cluster %s failed", self.cluster.name)
            result = SyncResult(controller_up=False)
        if not result.controller_up:
            self.failures += 1
            delay = backoff_delay(self.failures)
            if result.error:
                logger.warning(
                    "Slurm controller of %s unreachable (%s); retrying in %gs",
                    self.cluster.name,
                    result.error,
                    delay,
                )
            return delay
        if self.failures:
            logger.info("Slurm controller of %s answers again", self.cluster.name)
        self.failures = 0
        self._log(result)
        return self.interval_s

    def _log(self, result: SyncResult) -> None:
        if result.restarts:
            logger.info("Requeued jobs on %s: %s", self.cluster.name, result.restarts)
        logger.debug(
            "Synced %s: %d nodes and %d jobs new, %d nodes and %d jobs changed",
            self.cluster.name,
            result.nodes_created,
            result.jobs_created,
            len(result.nodes_changed),
            len(result.jobs_changed),
        )

    def run_forever(self) -> None:
        delay = 0.0
        while not self._stop.wait(delay):
            try:
                delay = self.cycle()
            finally:
                # A long-lived thread must drop connections the database closed.
                close_old_connections()

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run_forever, name="slurm-sync", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()
