"""Medbay's record of which partitions and pool a node is in, written as the engine moves it.

Partition moves made with `scontrol update` are lost when slurmctld restarts;
the drift check compares Slurm against `Node.partition_names`, so the engine
writes that record at the moment it moves a node rather than waiting for the
next sync (a restart in between would otherwise undo the move unnoticed).
"""

from __future__ import annotations

from clusters.backends.base import ClusterBackend, nodes_named
from clusters.models import Node, NodePool
from clusters.status import POOL_FOR_PARTITION


def record_membership(cluster_id: int, backend: ClusterBackend, names: list[str]) -> None:
    infos = nodes_named(backend, names)
    pools = {pool.kind: pool for pool in NodePool.objects.filter(cluster_id=cluster_id)}
    for info in infos:
        kinds = [POOL_FOR_PARTITION[p] for p in info.partitions if p in POOL_FOR_PARTITION]
        Node.objects.filter(cluster_id=cluster_id, name=info.name).update(
            partition_names=",".join(info.partitions),
            pool=pools.get(kinds[0]) if kinds else None,
            # Medbay's own move: the only membership drift re-apply may restore.
            medbay_partitions=list(info.partitions),
        )
