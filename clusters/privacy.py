"""Slurm's PrivateData, remembered per cluster in Django's cache.

The queue hides other users' job details when the controller's PrivateData
includes `jobs`, as `squeue` does for ordinary users. Reading it is a call to
`scontrol show config`, so it is cached (no model field: the value belongs to
slurmctld, and a reconfigure may change it at any time). Whoever talks to the
controller regularly (the sync) may refresh it with `remember_private_data`;
the queue reads through with `private_data_for`.
"""

from __future__ import annotations

import logging
import time

from django.core.cache import cache

from clusters.backends.base import BackendError, ClusterBackend

log = logging.getLogger(__name__)

PRIVATE_DATA_TTL_S = 300
# Not knowing must not leak: while the controller cannot be asked, act as if
# PrivateData=jobs were set, and ask again soon.
UNKNOWN_PRIVATE_DATA = frozenset({"jobs"})
UNKNOWN_TTL_S = 30
# The answers this process read last, for when the cache itself is unreachable
# (a Redis outage must not turn every queue page into an `scontrol` call).
_local: dict[int, tuple[frozenset[str], float]] = {}


def cache_key(cluster_id: int) -> str:
    return f"medbay:cluster:{cluster_id}:private-data"


def remember_private_data(cluster_id: int, backend: ClusterBackend) -> frozenset[str]:
    """Ask the controller now and cache its answer (or the fail-closed default)."""
    try:
        kinds = frozenset(backend.private_data())
        ttl = PRIVATE_DATA_TTL_S
    except BackendError as error:
        log.warning("cluster %s: cannot read PrivateData: %s", cluster_id, error.message)
        kinds, ttl = UNKNOWN_PRIVATE_DATA, UNKNOWN_TTL_S
    _local[cluster_id] = (kinds, time.monotonic() + ttl)
    try:
        cache.set(cache_key(cluster_id), sorted(kinds), ttl)
    except Exception:  # any cache backend's connection error: pages work without Redis
        log.warning("PrivateData of cluster %s kept in this process only", cluster_id)
    return kinds


def private_data_for(cluster_ids: list[int]) -> dict[int, frozenset[str]]:
    """PrivateData of each cluster: one cache round trip, the backend only on a miss."""
    try:
        cached = cache.get_many([cache_key(pk) for pk in cluster_ids])
    except Exception:  # Redis down: this process's last answers, else ask the controller
        log.warning("PrivateData read without the cache: it is unreachable", exc_info=True)
        remembered = {pk: _local_kinds(pk) for pk in cluster_ids}
        cached = {cache_key(pk): kinds for pk, kinds in remembered.items() if kinds is not None}
    result = {}
    for pk in cluster_ids:
        kinds = cached.get(cache_key(pk))
        if kinds is None:
            from clusters.backends.registry import backend_for
            from clusters.models import Cluster

            result[pk] = remember_private_data(pk, backend_for(Cluster.objects.get(pk=pk)))
        else:
            result[pk] = frozenset(kinds)
    return result


def _local_kinds(cluster_id: int) -> frozenset[str] | None:
    kinds, expires = _local.get(cluster_id, (None, 0.0))
    return kinds if time.monotonic() < expires else None


def forget_private_data(cluster_id: int) -> None:
    _local.pop(cluster_id, None)
    cache.delete(cache_key(cluster_id))
