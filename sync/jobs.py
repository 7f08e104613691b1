"""Jobs as the snapshot reports them: new, changed, requeued, vanished, reused ids.

On PostgreSQL each stored job comes back as one digest of its synced columns,
which the same digest of Slurm's values is compared with (see _stored_jobs).
"""

from __future__ import annotations

import hashlib
import json
import operator
import re
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from django.db import connection
from django.db.models import BigIntegerField, F, Func, Q, TextField, Value
from django.db.models.functions import Cast, Coalesce

from clusters.backends.base import JobInfo
from clusters.models import Cluster
from core.sql import bulk_write, one_of
from jobs.models import ACTIVE_JOB_STATES, Job, JobState, JobStateChange

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
VANISHED_REASON = "no longer reported by Slurm (see sacct for the outcome)"
# `JobState.values` builds a new list on every access; the sync asks once per job.
KNOWN_JOB_STATES = frozenset(JobState.values)
# Slurm prints an estimate as StartTime while a job waits and the time limit's
# end as EndTime while it runs; only a started or ended job has real ones.
NOT_YET_STARTED = frozenset({JobState.PENDING, JobState.REQUEUED})
NOT_YET_ENDED = NOT_YET_STARTED | {JobState.RUNNING, JobState.SUSPENDED, JobState.CONFIGURING}


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


# cluster pk -> {slurm id: (the JobInfo of the last cycle, its key)}. The parsers hand
# back the very JobInfo of the last poll for a record Slurm printed unchanged (most
# of them), whose key then needs no computing again: 60,000 digests a cycle were an
# eighth of a 12,500-node cycle. Each cycle replaces its cluster's entry.
_keys_by_cluster: dict[int, dict[int, tuple[JobInfo, object]]] = {}


def _slurm_keys(cluster_pk: int, seen: dict[int, JobInfo]) -> dict[int, object]:
    """slurm id -> the key of Slurm's values for each job, as _stored_jobs() holds it."""
    job_key = _job_key_function()
    last = _keys_by_cluster.get(cluster_pk, {})
    current, keys = {}, {}
    for job_id, info in seen.items():
        cached = last.get(job_id)
        key = cached[1] if cached is not None and cached[0] is info else job_key(_job_values(info))
        current[job_id], keys[job_id] = (info, key), key
    _keys_by_cluster[cluster_pk] = current
    return keys


def sync_jobs(cluster, infos, node_ids, actor, now, result, read_at=None) -> None:
    """READ_AT: when Slurm was read for this snapshot (None: at `now`). A job whose row
    was written after it (submitted through the portal meanwhile) could not be listed,
    and is not taken for one Slurm no longer reports."""
    seen = {info.job_id: info for info in infos}
    stored = _stored_jobs(cluster, list(seen))
    _retire_reused_ids(seen, stored)
    keys = _slurm_keys(cluster.pk, seen)
    new_jobs, candidates = [], []
    for job_id, info in seen.items():
        old = stored.get(job_id)
        if old is None:
            new_jobs.append(
                Job(
                    cluster=cluster,
                    slurm_id=job_id,
                    submit_at=info.submit_time,
                    updated_at=now,
                    **_job_values(info),
                )
            )
        elif old.key != keys[job_id]:
            candidates.append((job_id, old.pk, _job_values(info)))
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
    missing = [old.pk for job_id, old in stored.items() if job_id not in seen]
    written_since_read = _written_after(missing, read_at)
    for job_id, old in stored.items():
        if job_id in seen or old.state not in ACTIVE_JOB_STATES:
            continue
        if old.pk in written_since_read:
            continue
        row = Job(pk=old.pk, cluster=cluster, slurm_id=job_id, state=old.state)
        row.restart_count = old.restart_count
        history.append(_job_change(row, JobState.COMPLETED, VANISHED_REASON, actor, now))
        row.state, row.reason, row.node_names = JobState.COMPLETED, VANISHED_REASON, []
        vanished.append(row)
        if row.restart_count:
            result.finished_after_restart.append(row.pk)
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
    listed = one_of("slurm_id", job_ids)
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


def _written_after(pks: list[int], read_at: datetime | None) -> set[int]:
    """Of the stored jobs Slurm did not list, those written since Slurm was read (a job
    submitted through the portal meanwhile): not vanished. Asked only for these few,
    as decoding every stored job's timestamp each cycle cost a quarter of the diff."""
    if read_at is None or not pks:
        return set()
    return set(Job.objects.filter(pk__in=pks, updated_at__gt=read_at).values_list("pk", flat=True))


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
    if row.restart_count and old_state in ACTIVE_JOB_STATES and row.state not in ACTIVE_JOB_STATES:
        result.finished_after_restart.append(row.pk)


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
