"""`manage.py slurm_sync`: reconcile Slurm into the database, once or forever.

Run it beside the portal when REDIS_URL is set (its live updates then reach the
portal's websockets through Redis); without Redis, `manage.py serve` runs the
same loop inside the portal process instead.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from clusters.backends.base import BackendError
from sync.cycle import sync_once
from sync.loop import SyncLoop, cluster_to_sync


class Command(BaseCommand):
    help = "Reconcile Slurm's nodes, partitions and jobs into the database and publish changes."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="one cycle, then exit")
        parser.add_argument(
            "--interval",
            type=float,
            help="seconds between polls (default: the cluster's sync interval, "
            "MEDBAY_SYNC_INTERVAL_S for the environment's cluster)",
        )
        parser.add_argument(
            "--cluster",
            help="a cluster from `manage.py cluster list`, synced with its own configuration; "
            "else the environment's cluster, under this name (default: Slurm's ClusterName, "
            "else 'slurm')",
        )

    def handle(self, *args, **options):
        if options["interval"] is not None and options["interval"] <= 0:
            raise CommandError("--interval must be a positive number of seconds")
        cluster, backend = self._cluster_and_backend(options["cluster"])
        if not cluster.enabled:
            raise CommandError(
                f"Cluster {cluster.name} is disabled; "
                f"`manage.py cluster enable {cluster.name}` turns it back on."
            )
        interval = options["interval"] or cluster.config().sync_interval_s
        version = f" (Slurm {cluster.slurm_version})" if cluster.slurm_version else ""
        if options["once"]:
            self._once(cluster, backend, version)
            return
        self.stdout.write(
            f"Syncing cluster {cluster.name}{version} every {interval:g}s; Ctrl-C stops."
        )
        try:
            SyncLoop(cluster, backend, interval_s=interval).run_forever()
        except KeyboardInterrupt:
            self.stdout.write("Stopped.")

    @staticmethod
    def _cluster_and_backend(name: str | None):
        try:
            return cluster_to_sync(name)
        except (BackendError, ValueError) as error:
            which = f"cluster {name}" if name else "the environment's cluster"
            raise CommandError(f"Cannot set up the backend of {which}: {error}") from None

    def _once(self, cluster, backend, version: str) -> None:
        try:
            result = sync_once(cluster, backend)
        except BackendError as error:
            raise CommandError(f"Slurm refused the sync of {cluster.name}: {error}") from error
        if not result.controller_up:
            raise CommandError(
                f"Slurm controller of {cluster.name} unreachable: {result.error}. "
                "Nothing was changed."
            )
        drift = f"; partition drift: {result.partition_drift}" if result.partition_drift else ""
        self.stdout.write(
            f"Synced cluster {cluster.name}{version}: "
            f"{result.nodes_created} nodes and {result.jobs_created} jobs new, "
            f"{len(result.nodes_changed) - result.nodes_created} nodes and "
            f"{len(result.jobs_changed) - result.jobs_created} jobs changed, "
            f"{len(result.restarts)} restarts{drift}."
        )
