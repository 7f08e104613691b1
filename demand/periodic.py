"""The demand work done on a schedule: sample the signals when due, then decide.

The Slurm sync calls `on_snapshot` after every snapshot it applies, and the demo's
simulation loop calls `tick` itself; both at most every MEDBAY_DEMAND_SAMPLE_S. A
failure here is logged and never fails the sync that called it.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.utils import timezone

from clusters.backends import registry
from clusters.backends.base import BackendError, ClusterBackend, FleetProvider
from clusters.models import Cluster
from demand import deciding, sampling

logger = logging.getLogger(__name__)


def tick(
    cluster: Cluster,
    backend: ClusterBackend | None,
    fleet: FleetProvider | None,
    *,
    now: datetime | None = None,
) -> bool:
    """Sample and decide if the cluster's last sample is an interval old; whether it did."""
    now = now or timezone.now()
    if not sampling.due(cluster, now):
        return False
    sampling.sample(cluster, backend, fleet, now=now)
    deciding.decide_cluster(cluster, now=now)
    return True


def on_snapshot(cluster: Cluster, backend: ClusterBackend, nodes) -> None:
    """The sync's listener (sync/cycle.py snapshot_listeners): one indexed query a cycle
    until a sample is due."""
    try:
        if not sampling.due(cluster, timezone.now()):
            return
        fleet = registry.fleet_for(cluster)
    except (BackendError, ValueError) as error:
        logger.warning("No fleet for cluster %s; Kubernetes demand unread: %s", cluster, error)
        fleet = None
    try:
        tick(cluster, backend, fleet)
    except Exception:
        logger.exception("Demand sampling or decision on cluster %s failed", cluster.name)


def register() -> None:
    from sync.cycle import snapshot_listeners

    if on_snapshot not in snapshot_listeners:
        snapshot_listeners.append(on_snapshot)
