"""Slurm's accounting through `sacct --json` (or slurmrestd's `GET /slurmdb/vX/jobs`,
which answers the same document: slurm_rest.py): finished job attempts for the import.

`sacct -S/-E` selects jobs that were eligible or running at some time in the
window, not jobs that ended in it, so a window is asked for as given and the
records are kept only when their attempt ended inside it: a job that ran across
a boundary is read by both windows and kept by one. `-D` (duplicates) lists
every attempt of a requeued job (the earlier ones end REQUEUED); `-X` leaves
the steps out, since the allocation is what the reports count. Plain Python,
no Django.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, tzinfo
from typing import Protocol

from clusters.backends.base import AccountingRecord, BackendError
from clusters.backends.slurm_cli import Runner, error_from_result
from clusters.backends.slurm_parsers import (
    AccountingParseError,
    accounting_errors,
    decode_accounting_json,
)

# A busy year of one cluster printed by one sacct call is hundreds of MB; the
# importer asks day by day, so this only bounds a runaway.
SACCT_TIMEOUT_S = 300.0
# States in which an attempt is over; PENDING/RUNNING/SUSPENDED ones are not imported.
FINISHED_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "REQUEUED",
    }
)


class CommandRunner(Protocol):
    """What SlurmBackend offers: its runner, its commands' environment, its zone."""

    local_tz: tzinfo | None
    runner: Runner

    def command_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]: ...


def sacct_time(moment: datetime, local_tz: tzinfo | None) -> str:
    """sacct reads `-S/-E` in the client's local zone, without an offset."""
    local = moment.astimezone(local_tz) if local_tz else moment.astimezone()
    return local.strftime("%Y-%m-%dT%H:%M:%S")


def sacct_args(start: datetime, end: datetime, local_tz: tzinfo | None) -> list[str]:
    return [
        "sacct",
        "--json",
        "--allusers",
        "--duplicates",
        "--allocations",
        "--starttime",
        sacct_time(start, local_tz),
        "--endtime",
        sacct_time(end, local_tz),
    ]


def finished_in(records: Sequence[AccountingRecord], start: datetime, end: datetime):
    return [
        record
        for record in records
        if record.state in FINISHED_STATES
        and record.end_time is not None
        and start <= record.end_time < end
    ]


def checked_window(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    if start.tzinfo is None or end.tzinfo is None:
        raise ValueError("finished_jobs needs timezone-aware datetimes")
    return start.astimezone(UTC), end.astimezone(UTC)


def finished_jobs(backend: CommandRunner, start: datetime, end: datetime) -> list[AccountingRecord]:
    """Attempts that ended in [start, end), read from slurmdbd through sacct."""
    start, end = checked_window(start, end)
    args = sacct_args(start, end, backend.local_tz)
    # Longer than the backend's 10 s: a day of a busy cluster is a large answer.
    result = backend.runner(args, timeout=SACCT_TIMEOUT_S, env=backend.command_env())
    if result.returncode != 0:
        raise error_from_result(result)
    return finished_in(records_from_document("sacct", result.stdout), start, end)


def records_from_document(source: str, text: str | bytes) -> list[AccountingRecord]:
    """Every record of an accounting document: what `sacct --json` prints, or the body
    of slurmrestd's `GET /slurmdb/vX/jobs` (the same document)."""
    errors = accounting_errors(text)
    if errors:
        message = "; ".join(errors)
        raise BackendError(f"{source}: {message}", permanent="connect" not in message.lower())
    try:
        return decode_accounting_json(text)
    except AccountingParseError as error:
        raise BackendError(f"{source}: {error}", permanent=True) from error


def slurmdb_query(start: datetime, end: datetime) -> dict[str, str]:
    """`GET /slurmdb/vX/jobs` parameters that ask what `sacct_args` asks.

    Its times are Unix timestamps (no zone to get wrong). Unlike sacct, slurmrestd
    truncates each record's start and end to the window unless told not to (a job
    that ran across the window's start then reads as starting at it); sacct lists
    every user's jobs with --allusers, slurmrestd whenever no `users` are given."""
    return {
        "start_time": str(int(start.timestamp())),
        "end_time": str(int(end.timestamp())),
        "show_duplicates": "true",
        "skip_steps": "true",
        "disable_truncate_usage_time": "true",
    }
