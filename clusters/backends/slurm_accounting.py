"""Slurm's accounting through `sacct --json`: finished job attempts for the import.

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


def finished_jobs(backend: CommandRunner, start: datetime, end: datetime) -> list[AccountingRecord]:
    """Attempts that ended in [start, end), read from slurmdbd through sacct."""
    if start.tzinfo is None or end.tzinfo is None:
        raise ValueError("finished_jobs needs timezone-aware datetimes")
    args = sacct_args(start.astimezone(UTC), end.astimezone(UTC), backend.local_tz)
    # Longer than the backend's 10 s: a day of a busy cluster is a large answer.
    result = backend.runner(args, timeout=SACCT_TIMEOUT_S, env=backend.command_env())
    if result.returncode != 0:
        raise error_from_result(result)
    errors = accounting_errors(result.stdout)
    if errors:
        message = "; ".join(errors)
        raise BackendError(f"sacct: {message}", permanent="connect" not in message.lower())
    try:
        records = decode_accounting_json(result.stdout)
    except AccountingParseError as error:
        raise BackendError(str(error), permanent=True) from error
    return finished_in(records, start, end)
