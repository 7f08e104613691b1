"""`manage.py serve`: the portal under daphne, with the Slurm sync and an engine in-process.

With the in-memory channel layer a live update reaches only websockets of the
process that published it, so the sync loop and one remediation engine worker
run here, on threads beside the server; without an engine nothing found is
ever remediated. With REDIS_URL set, `slurm_sync` and `run_engine` may run as
their own processes instead (`--no-sync`, `--no-engine` here).
"""

from __future__ import annotations

import argparse

from django.conf import settings
from django.core.management.base import BaseCommand

from clusters.models import Cluster
from portal.server import parse_addr, serve, start_engine
from sync.loop import SyncLoop, cluster_to_sync


class Command(BaseCommand):
    help = "Serve the portal (HTTP and websockets) and, on Slurm, keep the database in sync."

    def add_arguments(self, parser):
        parser.add_argument("--addr", default="127.0.0.1:8000", help="host:port to serve on")
        parser.add_argument(
            "--engine",
            action=argparse.BooleanOptionalAction,
            default=True,
            help="run a remediation engine worker in this process (default: on)",
        )
        parser.add_argument(
            "--sync",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="run the Slurm sync loops in this process: the environment's cluster's "
            "(default: on when MEDBAY_BACKEND=slurm) and each enabled cluster of the table's "
            "(default: on)",
        )

    def handle(self, *args, **options):
        host, port = parse_addr(options["addr"])
        if options["sync"] is not False:
            self._start_syncs(environment=options["sync"] or settings.MEDBAY_BACKEND == "slurm")
        if options["engine"]:
            start_engine(f"serve-{port}")
            self.stdout.write("Remediation engine running in this process")
        self.stdout.write(self.style.SUCCESS(f"Medbay at http://{host}:{port}/"))
        serve(host, port)

    def _start_syncs(self, *, environment: bool) -> None:
        """A sync loop per enabled cluster, each on its own thread, so that one
        cluster's slow or unreachable controller only delays its own polls."""
        table = list(Cluster.objects.filter(from_environment=False, enabled=True).order_by("name"))
        loops = []
        if environment:
            cluster, backend = cluster_to_sync()
            if not cluster.enabled:
                self.stdout.write(f"Cluster {cluster.name} is disabled: not syncing it")
            elif cluster not in table:  # else it was moved into the table: synced below
                loops.append(
                    SyncLoop(cluster, backend, interval_s=cluster.config().sync_interval_s)
                )
        # A row whose backend cannot be built is retried by its own loop, which
        # records why on the row; the others go on.
        loops += [SyncLoop.for_cluster(cluster) for cluster in table]
        for loop in loops:
            loop.start()
            self.stdout.write(f"Syncing cluster {loop.cluster.name} every {loop.interval_s:g}s")
