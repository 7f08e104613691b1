"""Picks each cluster's backend and fleet provider.

The environment's cluster (MEDBAY_BACKEND / MEDBAY_FLEET, or what `use` installs)
has one instance of each per process: the simulator keeps its whole cluster in
memory, so the backend and the fleet must be the same simulated cluster. A
cluster configured in the table gets its own pair, built from its row by
`backend_for` / `fleet_for` and kept until its configuration changes.
"""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple

from django.conf import settings

from clusters.backends.base import ClusterBackend, FleetProvider
from clusters.config import ClusterConfig, FleetKind, Transport

if TYPE_CHECKING:
    from clusters.models import Cluster

_lock = threading.Lock()
_backend: ClusterBackend | None = None
_fleet: FleetProvider | None = None


class _Built(NamedTuple):
    name: str
    config: ClusterConfig
    backend: ClusterBackend
    fleet: FleetProvider


# Cluster pk -> what was built for it, and from which configuration.
_per_cluster: dict[int, _Built] = {}


def get_backend() -> ClusterBackend:
    global _backend
    with _lock:
        if _backend is None:
            _backend = _build_backend(settings.MEDBAY_BACKEND)
        return _backend


def get_fleet() -> FleetProvider:
    global _fleet
    backend = get_backend()
    with _lock:
        if _fleet is None:
            _fleet = _build_fleet(settings.MEDBAY_FLEET, backend)
        return _fleet


def use(backend: ClusterBackend | None, fleet: FleetProvider | None = None) -> None:
    """Install explicit implementations (the demo's simulator, tests) for the
    environment's cluster; forgets every table-configured cluster's too."""
    global _backend, _fleet
    with _lock:
        _backend = backend
        _fleet = fleet if fleet is not None else _fleet_for(backend)
        _per_cluster.clear()


def backend_for(cluster: Cluster) -> ClusterBackend:
    """CLUSTER's backend: the environment's for its cluster, else built from the row."""
    if cluster.from_environment:
        return get_backend()
    return _built_for(cluster).backend


def fleet_for(cluster: Cluster) -> FleetProvider:
    """CLUSTER's fleet provider, paired with `backend_for(cluster)`."""
    if cluster.from_environment:
        return get_fleet()
    return _built_for(cluster).fleet


def _built_for(cluster: Cluster) -> _Built:
    # How often to sync is not how to connect: only a change of the latter rebuilds,
    # and an unchanged cluster keeps its connections (a simulated one its whole cluster).
    config = replace(cluster.config(), sync_interval_s=0.0)
    with _lock:
        built = _per_cluster.get(cluster.pk)
        # The name too: a test database hands the same pk to another cluster.
        if built is None or built.config != config or built.name != cluster.name:
            backend = _backend_from(config)
            built = _Built(cluster.name, config, backend, _fleet_from(config, backend))
            _per_cluster[cluster.pk] = built
        return built


def _backend_from(config: ClusterConfig) -> ClusterBackend:
    if config.transport == Transport.REST:
        from clusters.backends.slurm_rest import JwtAuth, SlurmRestBackend

        # The accounts Medbay reads and acts as are the site's, as for the environment's
        # cluster: without MEDBAY_SLURM_JWT_USER a portal run as root could read nothing
        # (no token is ever made for root), and without an operator actions stay on the CLI.
        return SlurmRestBackend(
            config.slurmrestd_url,
            JwtAuth(
                key_path=config.jwt_key_file,
                token_user=os.environ.get("MEDBAY_SLURM_JWT_USER") or None,
            ),
            slurm_conf=config.slurm_conf or None,
            min_uid=settings.MEDBAY_MIN_UID,
            operator=os.environ.get("MEDBAY_SLURM_JWT_OPERATOR") or None,
        )
    if config.transport == Transport.CLI:
        from clusters.backends.slurm import SlurmBackend

        return SlurmBackend(slurm_conf=config.slurm_conf or None)
    return _simulator()


def _fleet_from(config: ClusterConfig, backend: ClusterBackend) -> FleetProvider:
    if config.fleet == FleetKind.KUBERNETES:
        from clusters.backends.kubernetes import KubernetesFleet

        return KubernetesFleet(
            kubeconfig=config.kubeconfig or None, context=config.kube_context or None
        )
    return _build_fleet(config.fleet, backend)


def _simulator() -> ClusterBackend:
    from clusters.backends.simulated import SimulatedCluster

    return SimulatedCluster.sized(
        settings.MEDBAY_SIM_NODES,
        prefix=settings.MEDBAY_SIM_PREFIX,
        seed=settings.MEDBAY_SIM_SEED,
        time_scale=settings.MEDBAY_SIM_TIME_SCALE,
    )


def _fleet_for(backend: ClusterBackend | None) -> FleetProvider | None:
    if backend is not None and isinstance(backend, FleetProvider):
        return backend
    return None


def _build_backend(name: str) -> ClusterBackend:
    if name == "slurm" and settings.MEDBAY_SLURM_API == "rest":
        from clusters.backends.slurm_rest import SlurmRestBackend

        return SlurmRestBackend.from_env(
            slurm_conf=settings.SLURM_CONF or None, min_uid=settings.MEDBAY_MIN_UID
        )
    if name == "slurm":
        from clusters.backends.slurm import SlurmBackend

        return SlurmBackend(slurm_conf=settings.SLURM_CONF or None)
    return _simulator()


def _build_fleet(name: str, backend: ClusterBackend) -> FleetProvider:
    if name == "kubernetes":
        from clusters.backends.kubernetes import KubernetesFleet

        return KubernetesFleet.from_env()
    if name == "slurm-spares":
        from clusters.backends.slurm_spares import SlurmSparesFleet

        return SlurmSparesFleet(backend)
    fleet = _fleet_for(backend)
    if fleet is None:
        from clusters.backends.slurm_spares import SlurmSparesFleet

        return SlurmSparesFleet(backend)
    return fleet
