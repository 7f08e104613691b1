"""The polling loop: which cluster this is, and a sync every few seconds with backoff."""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path
from typing import NamedTuple

from django.conf import settings
from django.db import close_old_connections

from clusters.backends import registry
from clusters.backends.base import BackendError, ClusterBackend
from clusters.backends.capabilities import RunsSlurmCommands
from clusters.models import Cluster
from sync.cycle import SyncResult, sync_once

logger = logging.getLogger("sync")

DEFAULT_CLUSTER_NAME = "slurm"
BACKOFF_FIRST_S = 2.0
BACKOFF_MAX_S = 30.0
CONFIG_VALUE = re.compile(r"^\s*(ClusterName|SLURM_VERSION)\s*=\s*(\S+)", re.MULTILINE)
CONF_CLUSTER_NAME = re.compile(r"^\s*ClusterName\s*=\s*(\S+)", re.MULTILINE | re.IGNORECASE)
VERSION_NUMBER = re.compile(r"\d+\.\d+(?:\.\d+)?")


class SlurmIdentity(NamedTuple):
    """The cluster's name and the installed Slurm version ("" when unknown)."""

    name: str
    version: str


def slurm_identity(backend: ClusterBackend) -> SlurmIdentity:
    """Name and version from `scontrol show config`; while the controller is
    down, from slurm.conf and `sinfo --version`, which need no controller. A backend
    that runs no Slurm commands (the simulator) is the default name, version unknown."""
    if not isinstance(backend, RunsSlurmCommands):
        return SlurmIdentity(DEFAULT_CLUSTER_NAME, "")
    try:
        values = dict(CONFIG_VALUE.findall(backend.run(["scontrol", "show", "config"])))
    except BackendError:
        values = {}
    name = values.get("ClusterName") or _conf_cluster_name(backend) or DEFAULT_CLUSTER_NAME
    return SlurmIdentity(name, values.get("SLURM_VERSION") or _installed_version(backend.run))


def _conf_cluster_name(backend: RunsSlurmCommands) -> str:
    path = Path(backend.slurm_conf or "/etc/slurm/slurm.conf")
    try:
        match = CONF_CLUSTER_NAME.search(path.read_text())
    except OSError:
        return ""
    return match.group(1) if match else ""


def _installed_version(run) -> str:
    try:
        match = VERSION_NUMBER.search(run(["sinfo", "--version"]))
    except BackendError:
        return ""
    return match.group(0) if match else ""


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
        backend: ClusterBackend,
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

    def cycle(self) -> float:
        """One reconciliation; returns how many seconds to wait before the next."""
        try:
            result = sync_once(self.cluster, self.backend, actor=self.actor)
        except BackendError as error:
            # Slurm refused a read (bad output, a killed command): say what, no traceback.
            logger.error("Sync of cluster %s failed: %s", self.cluster.name, error)
            result = SyncResult(controller_up=False)
        except Exception:  # a database hiccup must not end the loop either
            logger.exception("Sync of cluster %s failed", self.cluster.name)
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
