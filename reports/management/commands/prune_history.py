"""`manage.py prune_history [--days N] [--dry-run]`: delete history older than the retention.

N defaults to MEDBAY_HISTORY_RETENTION_DAYS; 0 (the default) keeps everything.
Rolls history up first, then deletes only what the rollups hold
(reports/retention.py says what is deleted and what is kept): on PostgreSQL
a month partition whose every row goes is dropped whole, the rest deleted in
batches; `--dry-run` counts against the rollups as they stand and writes nothing.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from clusters.models import Cluster
from reports.partitions import ensure_all
from reports.retention import prune
from reports.rollups import roll_up


class Command(BaseCommand):
    help = "Delete node, job and health-event history older than the retention, in batches."

    def add_arguments(self, parser):
        parser.add_argument("--days", type=int, default=None, help="keep this many days")
        parser.add_argument("--dry-run", action="store_true", help="count, delete nothing")

    def handle(self, *args, days=None, dry_run=False, **options):
        days = settings.MEDBAY_HISTORY_RETENTION_DAYS if days is None else days
        if days < 0:
            raise CommandError("--days must be 0 (keep everything) or more.")
        if days == 0:
            self.stdout.write("Retention is 0 days: keeping all history.")
            return
        cutoff = timezone.now() - timedelta(days=days)
        if not dry_run:
            # Rows written into the past wait in DEFAULT until their month has a partition.
            ensure_all()
            for cluster in Cluster.objects.order_by("name"):
                roll_up(cluster)
        result = prune(cutoff, dry_run=dry_run)
        verb = "would delete" if dry_run else "deleted"
        for table, count in result.rows.items():
            self.stdout.write(f"{verb} {count} {table} before {cutoff:%Y-%m-%d %H:%M} UTC")
        for name in result.dropped:
            self.stdout.write(f"{verb} month partition {name} whole")
        for name in result.skipped:
            self.stdout.write(f"{name}: not rolled up yet, so nothing was deleted")
