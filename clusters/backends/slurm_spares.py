"""A FleetProvider made of static spare nodes in a Slurm partition named `spare`.

Replacing a node moves a free spare into the failed node's partitions and takes
the failed node out of them, marked FAIL; moving between pools is moving between
the partitions train, infer and spare. This works on any ClusterBackend, so the
simulator and the real Slurm CLI behave the same.

Slurm forgets partition changes made with `scontrol update` when slurmctld
restarts or reconfigures, while Medbay keeps its own record of the moves it made
(`Node.medbay_partitions`); `reapply_pools` writes those moves, and only those,
back into Slurm, and the sync calls it when it sees the drift.
"""

from __future__ import annotations

from collections.abc import Sequence

from clusters.backends.base import BackendError, ClusterBackend, NodeInfo, pick_spare

SPARE_PARTITION = "spare"
POOL_PARTITIONS = {"training": "train", "inference": "infer", "spare": SPARE_PARTITION}
UNAVAILABLE_FLAGS = frozenset({"drain", "fail", "not_responding", "reboot_requested", "maint"})


class SlurmSparesFleet:
    """FleetProvider over a ClusterBackend whose spare nodes sit in partition `spare`.

    It has no capability beyond the protocol: Slurm shows no other controller's holds
    (`ReportsFleetHolders`); a drain's reason and user are read from the node instead."""

    name = "slurm-spares"

    def __init__(self, backend: ClusterBackend, *, spare_partition: str = SPARE_PARTITION):
        self.backend = backend
        self.spare_partition = spare_partition

    # ------------------------------------------------------------ reading
    def _nodes(self) -> dict[str, NodeInfo]:
        return {info.name: info for info in self.backend.nodes()}

    def _members(self) -> dict[str, list[str]]:
        return {info.name: list(info.nodes) for info in self.backend.partitions()}

    def spare_capacity(self) -> list[str]:
        """Idle, schedulable spares, in name order. Slurm cannot tell a sound spare from
        one whose GPU failed: which of them Medbay offers is remediation.spares."""
        return sorted(
            info.name
            for info in self.backend.nodes()
            if self.spare_partition in info.partitions
            and info.state == "idle"
            and not info.flags & UNAVAILABLE_FLAGS
        )

    # ------------------------------------------------------------ acting
    def cordon(self, node: str, reason: str) -> None:
        """Slurm has no cordon: a drain with the reason keeps new jobs off."""
        info = self._nodes().get(node)
        if info is not None and "drain" in info.flags and info.reason == reason:
            return
        self.backend.drain_node(node, reason)

    def uncordon(self, node: str) -> None:
        self.backend.resume_node(node)

    def evict(self, node: str, *, timeout_s: float = 300) -> None:
        """Requeue the node's requeueable jobs and cancel the rest."""
        for job in self.backend.jobs():
            if job.state in ("RUNNING", "SUSPENDED") and node in job.nodes:
                if job.requeue:
                    self.backend.requeue_job(job.job_id)
                else:
                    self.backend.cancel_job(job.job_id)

    def move_to_pool(self, node: str, pool: str) -> None:
        target = POOL_PARTITIONS.get(pool)
        if target is None:
            raise BackendError(f"Unknown pool {pool!r}", permanent=True)
        members = self._members()
        if target not in members:
            raise BackendError(f"Partition {target!r} does not exist", permanent=True)
        # Join the new partition before leaving the old ones, so the node is never
        # in no pool at all if this is interrupted.
        if node not in members[target]:
            self.backend.set_partition_nodes(target, [*members[target], node])
        for partition in POOL_PARTITIONS.values():
            if partition != target and node in members.get(partition, []):
                self._set(partition, [n for n in members[partition] if n != node])

    def replace(self, node: str, reason: str, *, spares: Sequence[str] = ()) -> str:
        """Bring the first of SPARES still free (else the first free spare) into `node`'s
        partitions; fail `node` and take it out."""
        nodes = self._nodes()
        failed = nodes.get(node)
        if failed is None:
            raise BackendError(f"Invalid node name specified: {node}", permanent=True)
        spare = pick_spare([name for name in self.spare_capacity() if name != node], spares)
        members = self._members()
        targets = [p for p in failed.partitions if p != self.spare_partition] or ["train"]
        # Fail first: whatever happens next, the broken node takes no new work.
        self.backend.fail_node(node, reason)
        for partition in targets:
            wanted = [n for n in members.get(partition, []) if n != node]
            self._set(partition, [*wanted, spare])
        self._set(
            self.spare_partition, [n for n in members.get(self.spare_partition, []) if n != spare]
        )
        for partition, names in members.items():
            if partition not in targets and node in names:
                self._set(partition, [n for n in names if n != node])
        if nodes[spare].flags & {"drain", "fail"} or nodes[spare].state == "down":
            self.backend.resume_node(spare)
        return spare

    def _set(self, partition: str, nodes: Sequence[str]) -> None:
        self.backend.set_partition_nodes(partition, list(dict.fromkeys(nodes)))


def medbay_moves(cluster) -> dict[str, set[str]]:
    """Node -> the partitions Medbay itself last put it in, for the nodes Medbay moved
    and whose membership no admin changed since (those wait for adoption instead)."""
    from clusters.models import Node

    pending = set((cluster.partition_edits or {}).keys())
    rows = Node.objects.filter(cluster=cluster, medbay_partitions__isnull=False).values_list(
        "name", "medbay_partitions"
    )
    return {name: set(parts or []) for name, parts in rows if name not in pending}


def reapply_pools(cluster, backend: ClusterBackend) -> list[str]:
    """Put Medbay's own moves back into Slurm after it forgot them; returns the
    partitions set. Nodes Medbay never moved keep whatever Slurm says."""
    moved = medbay_moves(cluster)
    if not moved:
        return []
    changed = []
    for info in sorted(backend.partitions(), key=lambda p: p.name):
        current = set(info.nodes)
        wanted = {name for name in current if name not in moved}
        wanted |= {name for name, parts in moved.items() if info.name in parts}
        if wanted != current:
            backend.set_partition_nodes(info.name, sorted(wanted))
            changed.append(info.name)
    return changed
