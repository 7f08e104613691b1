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

from django.core.cache import cache

from clusters.backends.base import BackendError, ClusterBackend

log = logging.getLogger(__name__)

PRIVATE_DATA_TTL_S = 300
# Not knowing must not leak: while the controller cannot be asked, act as if
# PrivateData=jobs were set, and ask again soon.
UNKNOWN_PRIVATE_DATA = frozenset({"jobs"})
UNKNOWN_TTL_S = 30


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
    cache.set(cache_key(cluster_id), sorted(kinds), ttl)
    return kinds


def private_data_for(cluster_ids: list[int]) -> dict[int, frozenset[str]]:
    """PrivateData of each cluster: one cache round trip, the backend only on a miss."""
    cached = cache.get_many([cache_key(pk) for pk in cluster_ids])
    result = {}
    for pk in cluster_ids:
        kinds = cached.get(cache_key(pk))
        if kinds is None:
            from clusters.backends.registry import get_backend

            result[pk] = remember_private_data(pk, get_backend())
        else:
            result[pk] = frozenset(kinds)
    return result


def forget_private_data(cluster_id: int) -> None:
    cache.delete(cache_key(cluster_id))
