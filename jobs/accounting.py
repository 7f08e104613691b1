"""Imports finished jobs from Slurm's accounting (sacct/slurmdbd), incrementally.

The import walks forward by end time, one window (a day) at a time: it asks the
backend for the attempts that ended in the window (outside any transaction),
then stores them and appends an AccountingImport row for the window in one
transaction. The next run starts where the last committed window ended, less
RESUME_OVERLAP, so a crash loses nothing, and a record read twice updates its
own row (the upsert is keyed by cluster, Slurm id and submit time) instead of
adding a second one.

Records are tied to Medbay's own Job rows by the same identity the sync uses:
the cluster and Slurm id, and of the rows with that id (Slurm reuses ids; see
Job.superseded) the one submitted last at or before the record. Medbay keeps a
requeued job's first submit time while Slurm gives each attempt a new one, so
every attempt of a requeued job lands on the same Job.
"""

from __future__ import annotations

import json
import logging
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from clusters.backends.base import AccountingRecord, ClusterBackend
from jobs.models import AccountingImport, AccountingJob, Job

logger = logging.getLogger("jobs.accounting")

WINDOW = timedelta(days=1)
# Without --since and without an earlier import: a year back (the reports' longest range).
FIRST_IMPORT_HISTORY = timedelta(days=366)
# slurmctld sends a job's end to slurmdbd a moment after the job ended (longer
# while slurmdbd is down: it queues them), so the last stretch is read again.
RESUME_OVERLAP = timedelta(minutes=10)
BATCH = 2000
# Slurm's submit times have whole seconds; Medbay may have seen the job a second late.
SUBMIT_SLACK = timedelta(seconds=1)

UPDATED_FIELDS = [
    "job",
    "name",
    "user",
    "account",
    "partition",
    "qos",
    "state",
    "start_at",
    "end_at",
    "elapsed_s",
    "gpus",
    "node_names",
    "exit_code",
    "restarts",
    "imported_at",
]


@dataclass
class ImportResult:
    """What one run of the import read and stored."""

    since: datetime
    until: datetime
    windows: int = 0
    records: int = 0
    matched: int = 0


def resume_point(cluster) -> datetime | None:
    """Where the next import starts: the last committed window's end, less the overlap."""
    last = AccountingImport.objects.filter(cluster=cluster).order_by("-until").first()
    return last.until - RESUME_OVERLAP if last else None


def import_accounting(
    cluster,
    backend: ClusterBackend,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    window: timedelta = WINDOW,
    progress: Callable[[ImportResult], None] | None = None,
) -> ImportResult:
    """Reads and stores every attempt that ended from `since` (default: where the
    last import stopped) until `until` (default: now). Raises BackendError when
    Slurm's accounting cannot be read; windows committed before that stay."""
    until = until or timezone.now()
    start = since or resume_point(cluster) or until - FIRST_IMPORT_HISTORY
    result = ImportResult(since=start, until=until)
    while start < until:
        end = min(start + window, until)
        records = own_records(cluster, backend.finished_jobs(start, end))
        with transaction.atomic():
            matched = store_records(cluster, records)
            AccountingImport.objects.create(
                cluster=cluster, since=start, until=end, records=len(records), matched=matched
            )
        result.windows += 1
        result.records += len(records)
        result.matched += matched
        if progress:
            progress(result)
        start = end
    return result


def own_records(cluster, records: Sequence[AccountingRecord]) -> list[AccountingRecord]:
    """A slurmdbd that several clusters share may answer for all of them (slurmrestd's
    jobs list does unless asked for one): only CLUSTER's own Slurm's records are its.
    Before its first sync has claimed its ClusterName nothing can be told apart."""
    name = cluster.slurm_cluster_name
    return [record for record in records if not name or record.cluster.lower() in ("", name)]


def store_records(cluster, records: Sequence[AccountingRecord]) -> int:
    """Upserts RECORDS; returns how many were matched to one of Medbay's jobs."""
    # sacct may list an attempt twice (a job that moved between windows' edges):
    # one INSERT ... ON CONFLICT must not touch a row twice, so the last one wins.
    unique = list({(record.job_id, record.submit_time): record for record in records}.values())
    matched = 0
    for offset in range(0, len(unique), BATCH):
        batch = unique[offset : offset + BATCH]
        jobs = medbay_jobs(cluster, {record.job_id for record in batch})
        restarts = restarts_before(cluster, batch)
        rows = []
        now = timezone.now()
        for record in batch:
            job_id = match_job(jobs.get(record.job_id, ()), record.submit_time)
            matched += job_id is not None
            rows.append(row_values(cluster.pk, record, job_id, restarts, now))
        upsert(rows)
    return matched


COLUMNS = [
    "cluster_id",
    "slurm_id",
    "submit_at",
    *(f"{name}_id" if name == "job" else name for name in UPDATED_FIELDS),
]


def row_values(cluster_id, record: AccountingRecord, job_id, restarts: dict, now) -> tuple:
    """One row in COLUMNS order, cut to the columns' lengths."""
    return (
        cluster_id,
        record.job_id,
        record.submit_time,
        job_id,
        record.name[:255],
        record.user[:64],
        record.account[:64],
        record.partition[:64],
        record.qos[:64],
        record.state[:16],
        record.start_time,
        record.end_time,
        max(0, record.elapsed_s),
        max(0, record.gpus),
        list(record.nodes),
        record.exit_code,
        restarts.get((record.job_id, record.submit_time), 0),
        now,
    )


def upsert(rows: list[tuple]) -> None:
    if connection.vendor == "postgresql":
        upsert_with_copy(rows)
        return
    AccountingJob.objects.bulk_create(
        [AccountingJob(**dict(zip(COLUMNS, row, strict=True))) for row in rows],
        update_conflicts=True,
        unique_fields=["cluster", "slurm_id", "submit_at"],
        update_fields=UPDATED_FIELDS,
    )


def upsert_with_copy(rows: list[tuple]) -> None:
    """PostgreSQL: COPY into a temporary table, then one INSERT ... ON CONFLICT.

    The ORM's bulk_create spent ~150 µs a row preparing parameters, which held a
    year's import of a large cluster to ~2,000 rows a second; COPY does not."""
    # Identifiers only, all from this module and the model: nothing from Slurm is spliced in.
    table = AccountingJob._meta.db_table
    columns = ", ".join(f'"{name}"' for name in COLUMNS)
    updates = ", ".join(f'"{name}" = EXCLUDED."{name}"' for name in COLUMNS[3:])
    with connection.cursor() as cursor:
        like = f"SELECT {columns} FROM {table} WITH NO DATA"  # noqa: S608
        cursor.execute(f"CREATE TEMPORARY TABLE IF NOT EXISTS accounting_incoming AS {like}")
        cursor.execute("TRUNCATE accounting_incoming")
        with cursor.copy(f"COPY accounting_incoming ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row((*row[:14], json.dumps(row[14]), *row[15:]))
        cursor.execute(
            f"INSERT INTO {table} ({columns}) SELECT {columns} FROM accounting_incoming "  # noqa: S608
            f'ON CONFLICT ("cluster_id", "slurm_id", "submit_at") DO UPDATE SET {updates}'
        )


def medbay_jobs(cluster, ids: Iterable[int]) -> dict[int, list[tuple[datetime | None, int]]]:
    """Medbay's rows for these Slurm ids: (submit time, pk), oldest first."""
    found: dict[int, list[tuple[datetime | None, int]]] = defaultdict(list)
    rows = Job.objects.filter(cluster=cluster, slurm_id__in=list(ids)).values_list(
        "slurm_id", "submit_at", "pk", "superseded"
    )
    for slurm_id, submitted, pk, superseded in rows:
        # A row without a submit time is the current one if it is not superseded.
        found[slurm_id].append((submitted, pk, superseded))
    return {
        slurm_id: sorted(
            (
                (submitted, pk)
                for submitted, pk, superseded in candidates
                if submitted or not superseded
            ),
            key=lambda item: (item[0] is not None, item[0] or datetime.min),
        )
        for slurm_id, candidates in found.items()
    }


def match_job(candidates: Sequence[tuple[datetime | None, int]], submitted: datetime) -> int | None:
    """The row submitted last at or before SUBMITTED; a row with no submit time
    (Medbay saw the job without one) only when no dated row fits."""
    dated = [item for item in candidates if item[0] is not None]
    times = [item[0] for item in dated]
    index = bisect_right(times, submitted + SUBMIT_SLACK)
    if index:
        return dated[index - 1][1]
    undated = [pk for when, pk in candidates if when is None]
    return undated[0] if undated else None


def restarts_before(cluster, batch: Sequence[AccountingRecord]) -> dict:
    """Requeues before each attempt: Slurm's own count where it records one (23.02+),
    else the unbroken run of REQUEUED attempts of the same id just before it
    (22.05 lists each attempt with -D but keeps no count), from this batch and
    what earlier windows stored."""
    counts = {
        (record.job_id, record.submit_time): record.restart_count
        for record in batch
        if record.restart_count is not None
    }
    unknown = [record for record in batch if record.restart_count is None]
    if not unknown:
        return counts
    attempts: dict[int, dict[datetime, str]] = defaultdict(dict)
    stored = AccountingJob.objects.filter(
        cluster=cluster, slurm_id__in={record.job_id for record in unknown}
    ).values_list("slurm_id", "submit_at", "state")
    for slurm_id, submitted, state in stored:
        attempts[slurm_id][submitted] = state
    for record in batch:
        attempts[record.job_id][record.submit_time] = record.state
    for record in unknown:
        earlier = sorted(
            (when, state)
            for when, state in attempts[record.job_id].items()
            if when < record.submit_time
        )
        run = 0
        for _, state in reversed(earlier):
            if state != "REQUEUED":
                break
            run += 1
        counts[(record.job_id, record.submit_time)] = run
    return counts
