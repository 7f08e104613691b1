from __future__ import annotations

from datetime import datetime, timedelta

from django.db import models
from django.utils import timezone

from clusters.config import ClusterConfig, FleetKind, Transport


class NodeState(models.TextChoices):
    """Slurm's base node state (flags are kept separately)."""

    IDLE = "idle"
    ALLOCATED = "allocated"
    MIXED = "mixed"
    DOWN = "down"
    FUTURE = "future"
    UNKNOWN = "unknown"


class NodeStatus(models.TextChoices):
    """What the board shows: base state and flags folded into one badge."""

    IDLE = "idle"
    ALLOCATED = "allocated"
    MIXED = "mixed"
    DRAINING = "draining"
    DRAINED = "drained"
    DOWN = "down"
    FAIL = "fail"
    REPLACING = "replacing"
    IN_REPAIR = "in_repair", "in repair"
    SPARE = "spare"
    INFERENCE = "inference"
    UNKNOWN = "unknown"


class PoolKind(models.TextChoices):
    TRAINING = "training"
    INFERENCE = "inference"
    SPARE = "spare"


class GpuHealth(models.TextChoices):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    FAILED = "failed"
    UNKNOWN = "unknown"


def stale_after(interval_s: float) -> timedelta:
    """How long without a sync reads as a hanging controller rather than a slow cycle."""
    return timedelta(seconds=max(120.0, 10 * interval_s))


class Cluster(models.Model):
    """A Slurm cluster (or the simulator) that Medbay watches and heals."""

    name = models.CharField(max_length=64, unique=True)
    backend = models.CharField(max_length=32, default="simulated")
    controller_up = models.BooleanField(default=True)
    controller_down_since = models.DateTimeField(null=True, blank=True)
    last_sync_at = models.DateTimeField(null=True, blank=True)
    slurm_version = models.CharField(max_length=32, blank=True)
    partition_drift = models.JSONField(default=dict, blank=True)
    # slurmctld's generation: its BOOT_TIME and how many reconfigures it served
    # (sdiag). A partition change seen within one generation is a person's edit,
    # not Slurm falling back to slurm.conf.
    controller_generation = models.CharField(max_length=64, blank=True)
    # Partition edits made outside Medbay to nodes Medbay had moved, waiting for an
    # admin to adopt them: {node: {"medbay": [...], "slurm": [...], "seen_at": iso}}.
    partition_edits = models.JSONField(default=dict, blank=True)
    # The history rollups (NodeStateDay, jobs.JobDay) hold every whole UTC day
    # before this one; reports read those days from them (reports/rollups.py).
    history_rolled_until = models.DateField(null=True, blank=True)
    # Configured by MEDBAY_BACKEND, MEDBAY_FLEET and the other variables (the
    # environment's single cluster, and what the demo or a test installs with
    # registry.use) rather than by the fields below; `manage.py cluster add` and
    # `edit` make a row configured by its fields.
    from_environment = models.BooleanField(default=True)
    enabled = models.BooleanField(default=True)
    transport = models.CharField(
        max_length=16, choices=Transport.choices, default=Transport.SIMULATED
    )
    slurm_conf = models.CharField(max_length=512, blank=True)
    slurmrestd_url = models.CharField(max_length=512, blank=True)
    # Paths only: the key and the kubeconfig hold secrets, read when connecting.
    jwt_key_file = models.CharField(max_length=512, blank=True)
    fleet = models.CharField(max_length=16, choices=FleetKind.choices, default=FleetKind.SIMULATED)
    kubeconfig = models.CharField(max_length=512, blank=True)
    kube_context = models.CharField(max_length=128, blank=True)
    sync_interval_s = models.FloatField(default=2.0)
    # The ClusterName its controller reported when first synced. Two rows whose
    # controllers report the same name are one Slurm configured twice: the row that
    # claimed it first keeps syncing, the other is refused (its sync_error says so).
    slurm_cluster_name = models.CharField(max_length=64, blank=True)
    # Why the last sync cycles failed, in words, and since when they fail; blank
    # once a cycle succeeds. Each cluster's own, so one cluster's fault is shown on
    # its own page and never stops another's sync.
    sync_error = models.TextField(blank=True)
    sync_error_since = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["slurm_cluster_name"],
                condition=~models.Q(slurm_cluster_name=""),
                name="one_row_per_slurm_cluster",
            )
        ]

    def __str__(self) -> str:
        return self.name

    def sync_problem(self, now: datetime | None = None) -> str:
        """What is wrong with this cluster's sync, in words; "" when nothing is."""
        if not self.enabled:
            return ""
        if self.sync_error:
            since = timezone.localtime(self.sync_error_since).strftime("%Y-%m-%d %H:%M:%S")
            return f"sync failing since {since}: {self.sync_error}"
        interval = self.config().sync_interval_s
        now = now or timezone.now()
        # A controller that hangs fails its cycle only when the command times out; a
        # cycle that never ends at all (or no sync running) shows as silence.
        if self.last_sync_at and now - self.last_sync_at > stale_after(interval):
            since = timezone.localtime(self.last_sync_at).strftime("%Y-%m-%d %H:%M:%S")
            return (
                f"no sync since {since} (it syncs every {interval:g}s): its controller "
                "is not answering, or no sync is running for it"
            )
        return ""

    def config(self) -> ClusterConfig:
        """How to reach this cluster: from the environment, or from this row."""
        if self.from_environment:
            return ClusterConfig.from_environment()
        return ClusterConfig(
            transport=self.transport,
            slurm_conf=self.slurm_conf,
            slurmrestd_url=self.slurmrestd_url,
            jwt_key_file=self.jwt_key_file,
            fleet=self.fleet,
            kubeconfig=self.kubeconfig,
            kube_context=self.kube_context,
            sync_interval_s=self.sync_interval_s,
        )


class Partition(models.Model):
    """A Slurm partition with the limits the job form checks against."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="partitions")
    name = models.CharField(max_length=64)
    max_time_minutes = models.PositiveIntegerField(null=True, blank=True)
    max_nodes = models.PositiveIntegerField(null=True, blank=True)
    is_default = models.BooleanField(default=False)
    checkpoint_grace_s = models.PositiveIntegerField(default=120)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="unique_partition_name")
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class NodePool(models.Model):
    """Medbay's record of which nodes train, serve inference or wait as spares."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="pools")
    name = models.CharField(max_length=64)
    kind = models.CharField(max_length=16, choices=PoolKind.choices)
    partition = models.ForeignKey(
        Partition, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="unique_pool_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    """A compute node with its Slurm state, flags, drain reason and pool."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=128)
    state = models.CharField(max_length=16, choices=NodeState.choices, default=NodeState.UNKNOWN)
    flags = models.CharField(max_length=255, blank=True, help_text="Comma-separated Slurm flags")
    status = models.CharField(
        max_length=16, choices=NodeStatus.choices, default=NodeStatus.UNKNOWN, db_index=True
    )
    reason = models.CharField(max_length=512, blank=True)
    # Who set Slurm's reason and when (reason_set_by_user, reason_changed_at).
    reason_set_by = models.CharField(max_length=64, blank=True)
    reason_set_at = models.DateTimeField(null=True, blank=True)
    # Who else holds the node out of service (an admin, HealthCheckProgram, Slurm,
    # another Kubernetes controller), in words; empty when nobody or only Medbay.
    held_by = models.CharField(max_length=255, blank=True)
    fleet_held_by = models.CharField(max_length=255, blank=True)
    # A failed node handed to the hardware people, with their ticket or note.
    in_repair_since = models.DateTimeField(null=True, blank=True)
    repair_note = models.CharField(max_length=255, blank=True)
    # The partitions Medbay itself last put the node in (None: Medbay never moved
    # it). Drift re-apply restores only these, never a membership someone else set.
    medbay_partitions = models.JSONField(null=True, blank=True)
    pool = models.ForeignKey(
        NodePool, null=True, blank=True, on_delete=models.SET_NULL, related_name="nodes"
    )
    partitions = models.ManyToManyField(Partition, blank=True, related_name="nodes")
    partition_names = models.CharField(max_length=255, blank=True)
    cpus = models.PositiveIntegerField(default=0)
    memory_mb = models.PositiveIntegerField(default=0)
    gpu_count = models.PositiveSmallIntegerField(default=0)
    gpus_used = models.PositiveSmallIntegerField(default=0)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)
    # The action of the node's active remediation run, if any; the board shows
    # "replacing" from it, since Slurm has no such state.
    active_remediation = models.CharField(max_length=20, blank=True)
    cordoned = models.BooleanField(default=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="unique_node_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def flag_set(self) -> set[str]:
        return {flag for flag in self.flags.split(",") if flag}


class Gpu(models.Model):
    """One GPU of a node, with the health Medbay last derived for it."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=64, blank=True)
    model = models.CharField(max_length=64, blank=True)
    pci_bus_id = models.CharField(max_length=16, blank=True)
    health = models.CharField(max_length=16, choices=GpuHealth.choices, default=GpuHealth.HEALTHY)
    health_reason = models.CharField(max_length=255, blank=True)
    health_changed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="unique_gpu_index")]
        ordering = ["node_id", "index"]

    def __str__(self) -> str:
        return f"{self.node.name}/gpu{self.index}"


class NodeStateChange(models.Model):
    """Append-only history of a node's board status: from, to, why, who, when."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="state_changes")
    from_status = models.CharField(max_length=16, choices=NodeStatus.choices, blank=True)
    to_status = models.CharField(max_length=16, choices=NodeStatus.choices)
    reason = models.CharField(max_length=512, blank=True)
    actor = models.CharField(max_length=128, default="slurm")
    at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["node", "at"]),
            # The reports' Lead() window runs over (node, at, id): read in this order,
            # months of history need no sort (which took ~1 s for 224k rows).
            models.Index(fields=["node", "at", "id"], name="clusters_nsc_node_at_id"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id}: {self.from_status} -> {self.to_status}"


class NodeStateDay(models.Model):
    """Rollup of NodeStateChange: node-seconds in a status on one UTC day, per kind of node.

    Nodes are counted under the GPU count, partitions and pool they had when the
    day was rolled up (just after it ended), so a later move leaves their past alone.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    status = models.CharField(max_length=16, choices=NodeStatus.choices)
    gpu_count = models.PositiveSmallIntegerField(default=0)
    partition_names = models.CharField(max_length=255, blank=True)
    pool_kind = models.CharField(max_length=16, blank=True)
    seconds = models.FloatField(default=0.0)

    class Meta:
        indexes = [models.Index(fields=["day"], name="clusters_nsd_day")]

    def __str__(self) -> str:
        return f"{self.day} {self.status} x{self.gpu_count}: {self.seconds:.0f} s"


class NodeDayTotal(models.Model):
    """Running totals of one node's history through the end of a UTC day (a rollup).

    A range's figures for the node are two rows apart: through its last day minus
    through the day before it starts.
    """

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    installed_s = models.FloatField(default=0.0)
    # Seconds out of service (reports/base.py OUT_OF_SERVICE).
    down_s = models.FloatField(default=0.0)
    # Changes into down or fail from a status that was not a fault.
    falls = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["day", "node"], name="clusters_ndt_day_node"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id} through {self.day}: {self.installed_s:.0f} s"


class ClusterChange(models.Model):
    """Append-only audit of a cluster's configuration: before, after, who, when."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="changes")
    before = models.JSONField(default=dict, blank=True)  # {} when the row was added
    after = models.JSONField(default=dict)
    changed_by = models.CharField(max_length=128)
    changed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-changed_at", "-id"]

    def __str__(self) -> str:
        return f"{self.cluster_id} changed by {self.changed_by} at {self.changed_at:%Y-%m-%d %H:%M}"

    def changed_fields(self) -> list[tuple[str, object, object]]:
        """(field, before, after) for each value that differs; before is None when added,
        and then the fields left empty are not listed."""
        names = sorted(set(self.before) | set(self.after))  # jsonb keeps no key order
        return [
            (name, self.before.get(name), self.after.get(name))
            for name in names
            if self.before.get(name) != self.after.get(name)
            and (self.before or self.after.get(name) != "")
        ]
