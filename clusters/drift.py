"""Partition drift: Slurm's partition membership versus Medbay's record of it.

Membership changed with `scontrol update partitionname=... nodes=...` (how the
spare pool moves nodes) lives only in slurmctld's memory: a restart or a
`scontrol reconfigure` silently puts every partition back to slurm.conf.
Medbay notices that as a partition whose membership now equals slurm.conf but
no longer equals what Medbay last recorded, flags it on the cluster (the board
shows a warning) and, unless MEDBAY_REAPPLY_POOLS is off, asks the spare-pool
driver to re-apply its view.

A membership that differs from both Medbay's record and slurm.conf is someone's
deliberate runtime change; Medbay follows it and flags nothing. When the backend
can say when slurmctld started and how often it reconfigured, a change seen
without a restart or reconfigure is never read as Slurm's revert, even when it
equals slurm.conf: an admin who puts a replaced node back by hand is shown
(`Cluster.partition_edits`) and adopted after an admin confirms, never fought.
Re-apply restores only Medbay's own moves.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterable

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from clusters.backends.base import BackendError, ClusterBackend, NodeInfo, PartitionInfo
from clusters.backends.capabilities import ReadsConfiguredPartitions, ReadsControllerGeneration
from clusters.live import publish_banner
from clusters.models import Cluster, Node, Partition

logger = logging.getLogger(__name__)

Membership = dict[str, frozenset[str]]
REAPPLY_MODULE = "clusters.backends.slurm_spares"


def slurm_membership(partitions: Iterable[PartitionInfo]) -> Membership:
    return {partition.name: frozenset(partition.nodes) for partition in partitions}


def configured_membership(backend: ClusterBackend) -> Membership | None:
    """slurm.conf's membership, or None when the backend cannot say (the
    simulator, or a portal host without the cluster's slurm.conf)."""
    if not isinstance(backend, ReadsConfiguredPartitions):
        return None
    try:
        return {name: frozenset(nodes) for name, nodes in backend.configured_partitions().items()}
    except BackendError as error:
        logger.debug("slurm.conf not readable, drift is not checked: %s", error)
        return None


def recorded_membership(cluster: Cluster, reported: Iterable[str]) -> Membership:
    """What Medbay believes each known partition holds: the membership it last
    accepted (`Node.partition_names`, from which `Node.pool` is derived), with
    an unresolved drift folded back in so that the flag survives the sync that
    already mirrored Slurm's reverted membership."""
    reported = set(reported)
    members: dict[str, set[str]] = {
        name: set()
        for name in Partition.objects.filter(cluster=cluster).values_list("name", flat=True)
    }
    rows = Node.objects.filter(cluster=cluster, name__in=reported).values_list(
        "name", "partition_names"
    )
    for name, partition_names in rows:
        for partition in filter(None, partition_names.split(",")):
            members.setdefault(partition, set()).add(name)
    for partition, difference in (cluster.partition_drift or {}).items():
        if partition in members:
            members[partition] |= set(difference.get("missing", ())) & reported
            members[partition] -= set(difference.get("unexpected", ()))
    return {name: frozenset(nodes) for name, nodes in members.items()}


def compare(recorded: Membership, current: Membership, configured: Membership | None) -> dict:
    """{partition: {"missing": [...], "unexpected": [...]}} for every partition
    Slurm put back to slurm.conf away from Medbay's record."""
    if configured is None:
        return {}
    drift = {}
    for name in sorted(recorded):
        want, have = recorded[name], current.get(name, frozenset())
        if want != have and have == configured.get(name, frozenset()):
            drift[name] = {"missing": sorted(want - have), "unexpected": sorted(have - want)}
    return drift


def detect(
    cluster: Cluster,
    backend: ClusterBackend,
    partitions: list[PartitionInfo],
    nodes: list[NodeInfo],
    *,
    restarted: bool | None = None,
) -> dict:
    configured = configured_membership(backend)
    if configured is None or not Node.objects.filter(cluster=cluster).exists():
        return {}  # nothing to compare with, or the first sync: no record to drift from yet
    recorded = recorded_membership(cluster, (node.name for node in nodes))
    found = compare(recorded, slurm_membership(partitions), configured)
    if restarted is False:
        # slurmctld did not restart: a partition back at slurm.conf is a person's
        # edit, not Slurm forgetting; only a drift already flagged carries on.
        flagged = cluster.partition_drift or {}
        found = {name: diff for name, diff in found.items() if name in flagged}
    return found


def controller_generation(backend: ClusterBackend) -> str | None:
    """slurmctld's boot time and reconfigure count, as text; "" if unknown this time,
    None when the backend cannot tell restarts apart at all."""
    if not isinstance(backend, ReadsControllerGeneration):
        return None
    try:
        return backend.controller_generation() or ""
    except BackendError as error:
        logger.debug("slurmctld generation not readable: %s", error)
        return ""


def restarted_since(cluster: Cluster, generation: str) -> bool | None:
    """Whether slurmctld restarted or reconfigured since the last sync (and so may
    have put partitions back to slurm.conf); None when it cannot be told."""
    if not generation or not cluster.controller_generation:
        return None
    return generation != cluster.controller_generation


def person_edits(cluster: Cluster, nodes: list[NodeInfo], restarted: bool | None) -> dict:
    """Nodes Medbay moved whose membership someone else changed without a restart:
    shown on the board and adopted only when an admin confirms, never fought."""
    pending = dict(cluster.partition_edits or {})
    current = {info.name: sorted(info.partitions) for info in nodes}
    rows = Node.objects.filter(cluster=cluster, medbay_partitions__isnull=False).values_list(
        "name", "medbay_partitions"
    )
    for name, medbay in rows:
        medbay = sorted(medbay or [])
        have = current.get(name)
        if have is None or have == medbay:
            pending.pop(name, None)
        elif restarted is False and name not in pending:
            seen = timezone.now().isoformat()
            pending[name] = {"medbay": medbay, "slurm": have, "seen_at": seen}
        elif name in pending:
            pending[name] = {**pending[name], "slurm": have}
    return pending


def save_edits(cluster: Cluster, edits: dict, generation: str) -> None:
    values = {}
    if (cluster.partition_edits or {}) != edits:
        values["partition_edits"] = edits
        transaction.on_commit(lambda: publish_banner(cluster.pk))
    if generation and generation != cluster.controller_generation:
        values["controller_generation"] = generation
    if values:
        Cluster.objects.filter(pk=cluster.pk).update(**values)
        for name, value in values.items():
            setattr(cluster, name, value)


def adopt(cluster: Cluster, names: list[str], *, actor: str) -> list[str]:
    """An admin accepts Slurm's membership for these nodes: Medbay stops claiming them."""
    from clusters.models import NodeStateChange

    edits = dict(cluster.partition_edits or {})
    adopted = [name for name in names if name in edits]
    with transaction.atomic():
        for node in Node.objects.filter(cluster=cluster, name__in=adopted):
            edit = edits.pop(node.name)
            Node.objects.filter(pk=node.pk).update(medbay_partitions=None)
            NodeStateChange.objects.create(
                node=node,
                from_status=node.status,
                to_status=node.status,
                reason=f"partition edit adopted: {','.join(edit['slurm']) or 'no partition'} "
                f"(Medbay had put it in {','.join(edit['medbay']) or 'no partition'})",
                actor=actor[:128],
            )
        Cluster.objects.filter(pk=cluster.pk).update(partition_edits=edits)
        cluster.partition_edits = edits
        transaction.on_commit(lambda: publish_banner(cluster.pk))
    return adopted


def reapply_hook() -> Callable[[Cluster, ClusterBackend], object] | None:
    """The spare-pool driver's `reapply_pools(cluster, backend)`, when installed."""
    try:
        module = importlib.import_module(REAPPLY_MODULE)
    except ImportError:
        return None
    return module.reapply_pools


def reapply(cluster: Cluster, backend: ClusterBackend, drift: dict) -> bool:
    """Ask the spare-pool driver to restore Medbay's membership in Slurm.

    Called only when the drift is new, before the sync mirrors Slurm's reverted
    membership into the database, so the driver still reads Medbay's view.
    Returns True when it ran (the caller then reads Slurm again).
    """
    if not drift or drift == (cluster.partition_drift or {}):
        return False
    if not settings.MEDBAY_REAPPLY_POOLS:
        logger.debug("Partition drift on %s: re-apply is disabled", cluster.name)
        return False
    hook = reapply_hook()
    if hook is None:
        logger.debug("Partition drift on %s: no re-apply hook installed", cluster.name)
        return False
    try:
        hook(cluster, backend)
    except BackendError as error:
        logger.warning("Re-applying partitions on %s failed: %s", cluster.name, error)
        return False
    logger.info("Re-applied Medbay's partition membership on %s after drift", cluster.name)
    return True


def save(cluster: Cluster, drift: dict) -> bool:
    """Store the drift; the board's banner is republished only when it changed."""
    if (cluster.partition_drift or {}) == drift:
        return False
    Cluster.objects.filter(pk=cluster.pk).update(partition_drift=drift)
    cluster.partition_drift = drift
    if drift:
        logger.warning("Partition drift on %s: %s", cluster.name, drift)
    else:
        logger.info("Partition drift on %s resolved", cluster.name)
    transaction.on_commit(lambda: publish_banner(cluster.pk))
    return True
