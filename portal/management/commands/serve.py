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
            help="run the Slurm sync loop in this process (default: on when MEDBAY_BACKEND=slurm)",
        )

    def handle(self, *args, **options):
        host, port = parse_addr(options["addr"])
        sync = options["sync"]
        if sync is None:
            sync = settings.MEDBAY_BACKEND == "slurm"
        if sync:
            cluster, backend = cluster_to_sync()
            if cluster.enabled:
                interval = cluster.config().sync_interval_s
                SyncLoop(cluster, backend, interval_s=interval).start()
                self.stdout.write(f"Syncing cluster {cluster.name} every {interval:g}s")
            else:
                self.stdout.write(f"Cluster {cluster.name} is disabled: not syncing it")
        if options["engine"]:
            start_engine(f"serve-{port}")
            self.stdout.write("Remediation engine running in this process")
        self.stdout.write(self.style.SUCCESS(f"Medbay at http://{host}:{port}/"))
        serve(host, port)
