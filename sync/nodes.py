"""Partitions, pools, nodes and their GPUs as the snapshot reports them."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Q

from clusters import holders
from clusters.backends.base import NodeInfo, PartitionInfo
from clusters.models import Cluster, Gpu, Node, NodePool, NodeStateChange, NodeStatus, Partition
from clusters.status import POOL_FOR_PARTITION, board_status
from core.sql import bulk_write, one_of

NODE_FIELDS = (
    "state",
    "flags",
    "status",
    "reason",
    "reason_set_by",
    "reason_set_at",
    "held_by",
    "pool_id",
    "partition_names",
    "cpus",
    "memory_mb",
    "gpu_count",
    "gpus_used",
)
SEEN_RESOLUTION = timedelta(seconds=30)
# A node handed over for repair shows "in repair" while Slurm keeps it out of service.
REPAIRABLE = frozenset({NodeStatus.FAIL, NodeStatus.DOWN, NodeStatus.DRAINED})


def sync_partitions(cluster: Cluster, partitions: list[PartitionInfo]) -> dict[str, Partition]:
    rows = {p.name: p for p in Partition.objects.filter(cluster=cluster)}
    new, changed = [], []
    for info in partitions:
        row = rows.get(info.name)
        if row is None:
            new.append(
                Partition(
                    cluster=cluster,
                    name=info.name,
                    max_time_minutes=info.max_time_minutes,
                    max_nodes=info.max_nodes,
                    is_default=info.default,
                )
            )
            continue
        values = (info.max_time_minutes, info.max_nodes, info.default)
        if (row.max_time_minutes, row.max_nodes, row.is_default) != values:
            row.max_time_minutes, row.max_nodes, row.is_default = values
            changed.append(row)
    if new:
        for row in Partition.objects.bulk_create(new):
            rows[row.name] = row
    if changed:
        Partition.objects.bulk_update(changed, ["max_time_minutes", "max_nodes", "is_default"])
    return rows


def pools_by_partition(cluster: Cluster, partitions: dict[str, Partition]) -> dict[str, NodePool]:
    pools = {pool.name: pool for pool in NodePool.objects.filter(cluster=cluster)}
    by_partition: dict[str, NodePool] = {}
    missing = []
    for name, partition in partitions.items():
        kind = POOL_FOR_PARTITION.get(name)
        if kind is None:
            continue
        pool = pools.get(kind)
        if pool is None:
            pool = NodePool(cluster=cluster, name=kind, kind=kind, partition=partition)
            pools[kind] = pool
            missing.append(pool)
        by_partition[name] = pool
    if missing:
        NodePool.objects.bulk_create(missing)
    return by_partition


def _pool_for(info: NodeInfo, pools: dict[str, NodePool]) -> NodePool | None:
    for partition in info.partitions:
        if partition in pools:
            return pools[partition]
    return None


def _node_values(
    info: NodeInfo, pool: NodePool | None, remediation: str, in_repair: bool = False
) -> tuple:
    """The NODE_FIELDS of a node as the snapshot reports it, in that order."""
    status = board_status(info.state, info.flags, pool.kind if pool else None, remediation)
    if in_repair and status in REPAIRABLE:
        status = NodeStatus.IN_REPAIR
    return (
        info.state,
        ",".join(sorted(info.flags)),
        status,
        info.reason[:512],
        info.reason_set_by[:64],
        info.reason_set_at,
        holders.describe(holders.other_holders(info))[:255],
        # The id, not the object: comparing `row.pool` would load each node's pool.
        pool.pk if pool else None,
        ",".join(info.partitions),
        info.cpus,
        info.memory_mb,
        info.gpus,
        info.gpus_used,
    )


def _stored_nodes(cluster: Cluster) -> dict[str, tuple[int, str, bool, tuple]]:
    """name -> (pk, active remediation, in repair, NODE_FIELDS values): plain tuples."""
    rows = Node.objects.filter(cluster=cluster).values_list(
        "name", "pk", "active_remediation", "in_repair_since", *NODE_FIELDS
    )
    return {
        name: (pk, remediation, repair is not None, tuple(values))
        for name, pk, remediation, repair, *values in rows
    }


def sync_nodes(cluster, infos, partition_rows, pools, actor, now, result) -> dict[str, int]:
    """Reconcile nodes; returns name -> primary key of every node of the cluster."""
    stored = _stored_nodes(cluster)
    new_nodes, changed, history = [], [], []
    changed_fields: set[str] = set()
    for info in infos:
        pool = _pool_for(info, pools)
        old = stored.get(info.name)
        values = _node_values(info, pool, old[1] if old else "", bool(old and old[2]))
        fields = dict(zip(NODE_FIELDS, values, strict=True))
        if old is None:
            row = Node(cluster=cluster, name=info.name, last_seen_at=now, updated_at=now, **fields)
            new_nodes.append(row)
            continue
        if old[3] == values:
            continue
        row = Node(pk=old[0], cluster=cluster, name=info.name, updated_at=now, **fields)
        changed.append(row)
        changed_fields.update(
            name
            for name, was, now_is in zip(NODE_FIELDS, old[3], values, strict=True)
            if was != now_is
        )
        old_status = old[3][NODE_FIELDS.index("status")]
        if old_status != row.status:
            history.append(_node_change(row, old_status, actor, now))
    ids = {name: old[0] for name, old in stored.items()}
    if new_nodes:
        created = Node.objects.bulk_create(new_nodes)
        for row in created:
            ids[row.name] = row.pk
            history.append(_node_change(row, "", actor, now))
        models_by_name = {info.name: info.gpu_model for info in infos}
        Gpu.objects.bulk_create(
            Gpu(
                node=row,
                index=index,
                model=models_by_name.get(row.name, ""),
                pci_bus_id=default_pci_bus_id(row.gpu_count, index),
            )
            for row in created
            for index in range(row.gpu_count)
        )
        result.nodes_created = len(created)
    # Only the columns that changed somewhere: the write's cost grows with rows x columns.
    fields = [name for name in NODE_FIELDS if name in changed_fields]
    bulk_write(Node, changed, [*fields, "updated_at"])
    _mark_seen(cluster, [stored[info.name][0] for info in infos if info.name in stored], now)
    NodeStateChange.objects.bulk_create(history)
    _sync_node_partitions(ids, infos, partition_rows, [*new_nodes, *changed])
    result.nodes_changed = [row.pk for row in [*new_nodes, *changed]]
    return ids


def _mark_seen(cluster: Cluster, node_ids: list[int], now: datetime) -> None:
    """One statement for every node Slurm still reports, changed or not.

    Rewriting every node's row on every cycle (every few seconds) only made
    PostgreSQL churn through dead tuples and WAL; a row is rewritten once its
    last sighting is SEEN_RESOLUTION old, so "last seen" is exact to that.
    """
    if node_ids:
        rows = Node.objects.filter(one_of("pk", node_ids), cluster=cluster)
        stale = Q(last_seen_at__isnull=True) | Q(last_seen_at__lte=now - SEEN_RESOLUTION)
        rows.filter(stale).update(last_seen_at=now)


# Bus addresses of the eight GPUs of an HGX/DGX H100 board. Until an agent
# reports the real inventory they let kernel-log XIDs (which name only the PCI
# address) find their GPU.
HGX_8_GPU_BUS_IDS = (
    "0000:18:00", "0000:2a:00", "0000:3a:00", "0000:5d:00",
    "0000:9a:00", "0000:ab:00", "0000:ba:00", "0000:db:00",
)  # fmt: skip


def default_pci_bus_id(gpu_count: int, index: int) -> str:
    return HGX_8_GPU_BUS_IDS[index] if gpu_count == 8 else ""


def _node_change(row: Node, old_status: str, actor: str, now: datetime) -> NodeStateChange:
    return NodeStateChange(
        node=row,
        from_status=old_status,
        to_status=row.status,
        reason=row.reason,
        actor=actor,
        at=now,
    )


def _sync_node_partitions(ids, infos, partition_rows, touched) -> None:
    """Rewrite partition links only for nodes whose partition list changed."""
    touched_names = {row.name for row in touched}
    if not touched_names:
        return
    through = Node.partitions.through
    node_ids = [ids[info.name] for info in infos if info.name in touched_names]
    through.objects.filter(node_id__in=node_ids).delete()
    through.objects.bulk_create(
        through(node_id=ids[info.name], partition_id=partition_rows[name].pk)
        for info in infos
        if info.name in touched_names
        for name in info.partitions
        if name in partition_rows
    )
