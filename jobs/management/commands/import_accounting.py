"""`manage.py import_accounting [--since DATE]`: finished jobs from Slurm's accounting.

Incremental and idempotent (see jobs/accounting.py): a plain run continues
where the last one stopped; `--since` reads again from a date, jobs from
before Medbay was installed included, without storing anything twice.
"""

from __future__ import annotations

from datetime import datetime, time

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from clusters.backends.base import BackendError
from jobs.accounting import import_accounting, resume_point
from sync.loop import cluster_to_sync


def parse_since(text: str) -> datetime:
    """A date (`2026-01-01`, midnight in TIME_ZONE) or an ISO date-time."""
    try:
        moment = parse_datetime(text)
        day = None if moment else parse_date(text)
    except ValueError:
        moment = day = None
    if day is not None:
        moment = datetime.combine(day, time.min)
    if moment is None:
        raise CommandError(f"--since: {text!r} is not a date (YYYY-MM-DD) or ISO date-time")
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment)
    return moment


class Command(BaseCommand):
    help = "Import finished jobs from Slurm's accounting (sacct), incrementally and idempotently."

    def add_arguments(self, parser):
        parser.add_argument(
            "--since",
            help="read from this date (YYYY-MM-DD) or date-time; default: where the "
            "last import stopped, or a year back on the first run",
        )
        parser.add_argument(
            "--cluster",
            help="a cluster from `manage.py cluster list`, read through its own configuration; "
            "else the environment's cluster, under this name (default: Slurm's ClusterName, "
            "else 'slurm')",
        )

    def handle(self, *args, **options):
        since = parse_since(options["since"]) if options["since"] else None
        now = timezone.now()
        if since is not None and since >= now:
            raise CommandError("--since must be in the past")
        try:
            cluster, backend = cluster_to_sync(options["cluster"])
        except (BackendError, ValueError) as error:
            raise CommandError(f"Cannot set up the backend of that cluster: {error}") from None
        start = since or resume_point(cluster)
        self.stdout.write(
            f"Importing accounting of cluster {cluster.name} "
            + (f"from {start:%Y-%m-%d %H:%M %Z}" if start else "for the past year")
        )
        try:
            result = import_accounting(cluster, backend, since=since, until=now)
        except BackendError as error:
            raise CommandError(
                f"Slurm's accounting of {cluster.name} could not be read: {error}. "
                "Windows imported before this one are kept; run again to continue."
            ) from error
        self.stdout.write(
            f"Imported {result.records} job attempt(s) in {result.windows} window(s) "
            f"up to {result.until:%Y-%m-%d %H:%M %Z}; {result.matched} matched to Medbay's jobs."
        )
