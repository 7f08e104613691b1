"""Picks the cluster backend and fleet provider from MEDBAY_BACKEND / MEDBAY_FLEET.

One instance of each per process: the simulator keeps its whole cluster in
memory, so the backend and the fleet must be the same simulated cluster.
"""

from __future__ import annotations

import threading

from django.conf import settings

from clusters.backends.base import ClusterBackend, FleetProvider

_lock = threading.Lock()
_backend: ClusterBackend | None = None
_fleet: FleetProvider | None = None


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
    """Install explicit implementations (the demo's simulator, tests)."""
    global _backend, _fleet
    with _lock:
        _backend = backend
        _fleet = fleet if fleet is not None else _fleet_for(backend)


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
    from clusters.backends.simulated import SimulatedCluster

    return SimulatedCluster.sized(
        settings.MEDBAY_SIM_NODES,
        prefix=settings.MEDBAY_SIM_PREFIX,
        seed=settings.MEDBAY_SIM_SEED,
        time_scale=settings.MEDBAY_SIM_TIME_SCALE,
    )


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
