"""The polling loop: which cluster this is, and a sync every few seconds with backoff."""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import close_old_connections

from clusters.backends import registry
from clusters.backends.base import BackendError, ClusterBackend
from clusters.models import Cluster
from sync.cycle import SyncResult, record_sync_error, sync_once
from sync.identity import slurm_identity

logger = logging.getLogger("sync")

BACKOFF_FIRST_S = 2.0
BACKOFF_MAX_S = 30.0


def ensure_cluster(backend: ClusterBackend, name: str | None = None) -> Cluster:
    """The Cluster row for this backend, created on first use, with its Slurm version."""
    identity = slurm_identity(backend)
    cluster, _ = Cluster.objects.get_or_create(
        name=name or identity.name, defaults={"backend": backend.name}
    )
    updates = {"backend": backend.name}
    if identity.version:
        updates["slurm_version"] = identity.version
    if any(getattr(cluster, key) != value for key, value in updates.items()):
        Cluster.objects.filter(pk=cluster.pk).update(**updates)
        for key, value in updates.items():
            setattr(cluster, key, value)
    return cluster


def cluster_to_sync(name: str | None = None) -> tuple[Cluster, ClusterBackend]:
    """The cluster to sync and its backend: NAME from the table with its own
    configuration, else the environment's cluster (named NAME, or as Slurm names it).

    A cluster moved into the table (`manage.py cluster edit`) is synced with its
    row's backend even when found through the environment's Slurm.
    """
    configured = Cluster.objects.filter(name=name, from_environment=False).first()
    backend = registry.backend_for(configured) if configured else registry.get_backend()
    cluster = ensure_cluster(backend, name)
    return cluster, registry.backend_for(cluster)


def backoff_delay(failures: int) -> float:
    """2, 4, 8, 16, 30, 30 ... seconds after 1, 2, 3 ... failed cycles in a row."""
    return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** max(failures - 1, 0))


class SyncLoop:
    """Polls the backend and reconciles, backing off while Slurm is unreachable.

    An outage only delays the next poll: sync_once records it and changes no
    node or job, so a controller restart can never read as "every node is gone".
    """

    def __init__(
        self,
        cluster: Cluster,
        backend: ClusterBackend | None,
        *,
        interval_s: float | None = None,
        actor: str = "slurm",
    ) -> None:
        self.cluster = cluster
        self.backend = backend
        self.interval_s = settings.MEDBAY_SYNC_INTERVAL_S if interval_s is None else interval_s
        self.actor = actor
        self.failures = 0
        self._stop = threading.Event()

    @classmethod
    def for_cluster(cls, cluster: Cluster, **options) -> SyncLoop:
        """A loop for a table cluster whose backend is built at its first cycle: a
        row that cannot be built (a JWT key path that is wrong) is then retried
        and reported like any failing cycle, and the other clusters' loops go on."""
        return cls(cluster, None, interval_s=cluster.sync_interval_s, **options)

    def cycle(self) -> float:
        """One reconciliation; returns how many seconds to wait before the next."""
        try:
            result = sync_once(self.cluster, self.connect(), actor=self.actor)
        except BackendError as error:
            # Slurm refused a read (bad output, a killed command): say what, no traceback.
            logger.error("Sync of cluster %s failed: %s", self.cluster.name, error)
            result = SyncResult(controller_up=False)
        except Exception as error:  # a database hiccup must not end the loop either
            logger.exception("Sync of cluster %s failed", self.cluster.name)
            self._record(f"Medbay's sync failed: {type(error).__name__}: {error}")
            result = SyncResult(controller_up=False)
        if not result.controller_up:
            self.failures += 1
            delay = backoff_delay(self.failures)
            if result.error:
                logger.warning(
                    "Slurm controller of %s unreachable (%s); retrying in %gs",
                    self.cluster.name,
                    result.error,
                    delay,
                )
            return delay
        if self.failures:
            logger.info("Slurm controller of %s answers again", self.cluster.name)
        self.failures = 0
        self._log(result)
        return self.interval_s

    def connect(self) -> ClusterBackend:
        """The backend, built from the row at first use."""
        if self.backend is None:
            try:
                self.backend = registry.backend_for(self.cluster)
            except (BackendError, ValueError) as error:
                message = f"Cannot set up the cluster's backend: {error}"
                record_sync_error(self.cluster, message)
                raise BackendError(message, permanent=True) from None
        return self.backend

    def _record(self, message: str) -> None:
        try:
            record_sync_error(self.cluster, message)
        except Exception:  # the database itself is what failed: the log has it
            logger.exception("Cannot record the sync error of %s", self.cluster.name)

    def _log(self, result: SyncResult) -> None:
        if result.restarts:
            logger.info("Requeued jobs on %s: %s", self.cluster.name, result.restarts)
        logger.debug(
            "Synced %s: %d nodes and %d jobs new, %d nodes and %d jobs changed",
            self.cluster.name,
            result.nodes_created,
            result.jobs_created,
            len(result.nodes_changed),
            len(result.jobs_changed),
        )

    def run_forever(self) -> None:
        delay = 0.0
        while not self._stop.wait(delay):
            try:
                delay = self.cycle()
            finally:
                # A long-lived thread must drop connections the database closed.
                close_old_connections()

    def start(self) -> threading.Thread:
        name = f"slurm-sync-{self.cluster.name}"
        thread = threading.Thread(target=self.run_forever, name=name, daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()
