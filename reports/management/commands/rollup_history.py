"""`manage.py rollup_history [--since DATE]`: roll whole days of history up for the reports.

Idempotent: each cluster's days from its mark (or DATE, to recompute days whose
raw rows changed) up to today are rewritten (reports/rollups.py). On
PostgreSQL it first gives the history tables their partitions for the coming
months, and for any month written into the past (reports/partitions.py).
The demand samples are rolled up into hours too (demand/history.py), and raw samples
older than MEDBAY_DEMAND_RAW_DAYS deleted once their hours are written.
"""

from __future__ import annotations

from datetime import date, timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from clusters.models import Cluster
from demand import history as demand_history
from reports.partitions import ensure_all
from reports.rollups import roll_up


class Command(BaseCommand):
    help = "Roll whole UTC days of node, job and fault history up into daily rollups."

    def add_arguments(self, parser):
        parser.add_argument("--since", help="recompute from this date (YYYY-MM-DD) on")

    def handle(self, *args, since=None, **options):
        try:
            first = date.fromisoformat(since) if since else None
        except ValueError as error:
            raise CommandError(f"--since: {error}") from error
        for name in ensure_all():
            self.stdout.write(f"partition {name} created")
        for cluster in Cluster.objects.order_by("name"):
            days = roll_up(cluster, since=first)
            self.stdout.write(
                f"{cluster.name}: {days} days rolled up, "
                f"complete until {cluster.history_rolled_until}"
            )
            now = timezone.now()
            hours = demand_history.roll_up(cluster, now)
            cutoff = now - timedelta(days=settings.MEDBAY_DEMAND_RAW_DAYS)
            pruned = demand_history.prune(cluster, cutoff)
            self.stdout.write(
                f"{cluster.name}: {hours} hours of demand rolled up, "
                f"{pruned} raw demand samples before {cutoff:%Y-%m-%d} deleted"
            )
