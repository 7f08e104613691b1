from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class Metric(models.TextChoices):
    """One figure a demand source reads; `DemandSample.scope` says of what (a partition,
    a pool) when the cluster has several."""

    TRAINING_PENDING_JOBS = "training_pending_jobs", "training jobs pending"
    TRAINING_PENDING_NODES = "training_pending_nodes", "training nodes requested"
    TRAINING_PENDING_GPUS = "training_pending_gpus", "training GPUs requested"
    TRAINING_LONGEST_WAIT_S = "training_longest_wait_s", "longest training wait (s)"
    # Seconds from the sample to Slurm's expected start of the longest-waiting job.
    TRAINING_EXPECTED_START_S = "training_expected_start_s", "its expected start in (s)"
    INFERENCE_LOAD = "inference_load", "inference load"
    INFERENCE_PENDING_JOBS = "inference_pending_jobs", "inference jobs pending"
    INFERENCE_PENDING_NODES = "inference_pending_nodes", "inference nodes requested"
    INFERENCE_ALLOCATED_NODES = "inference_allocated_nodes", "inference nodes allocated"
    K8S_PENDING_PODS = "k8s_pending_pods", "inference pods pending"
    K8S_DESIRED_REPLICAS = "k8s_desired_replicas", "replicas the autoscaler wants"
    K8S_CURRENT_REPLICAS = "k8s_current_replicas", "replicas running"
    POOL_NODES = "pool_nodes", "nodes in the pool"
    POOL_BUSY_NODES = "pool_busy_nodes", "nodes running jobs"


class DemandSample(models.Model):
    """Append-only: one reading of one demand figure, or why it could not be read."""

    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="+")
    metric = models.CharField(max_length=32, choices=Metric.choices)
    scope = models.CharField(max_length=64, blank=True)
    value = models.FloatField(null=True, blank=True)
    unit = models.CharField(max_length=16, blank=True)  # the inference load's: latency_ms, ...
    # Why there is no value: Prometheus down, a query that does not parse, an API error.
    missing = models.CharField(max_length=255, blank=True)
    sampled_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["sampled_at", "id"]
        indexes = [
            models.Index(fields=["cluster", "metric", "sampled_at"], name="demand_sample_series"),
            models.Index(fields=["sampled_at"], name="demand_sample_time"),
        ]

    def __str__(self) -> str:
        shown = self.missing if self.value is None else f"{self.value:g}"
        return f"{self.metric}[{self.scope}] = {shown} at {self.sampled_at:%H:%M:%S}"


class DemandHour(models.Model):
    """One hour of one figure's samples, rolled up (demand/history.py): the raw samples
    go after MEDBAY_DEMAND_RAW_DAYS, these stay for the long charts and replays."""

    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="+")
    metric = models.CharField(max_length=32, choices=Metric.choices)
    scope = models.CharField(max_length=64, blank=True)
    hour = models.DateTimeField()
    unit = models.CharField(max_length=16, blank=True)
    mean = models.FloatField(null=True, blank=True)
    low = models.FloatField(null=True, blank=True)
    high = models.FloatField(null=True, blank=True)
    samples = models.PositiveIntegerField(default=0)
    missing = models.PositiveIntegerField(default=0)  # samples without a value

    class Meta:
        ordering = ["hour", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "metric", "scope", "hour"], name="one_demand_hour"
            )
        ]

    def __str__(self) -> str:
        return f"{self.metric}[{self.scope}] {self.hour:%Y-%m-%d %H}h"


class InferenceUnit(models.TextChoices):
    LATENCY_MS = "latency_ms", "latency (ms)"
    QUEUE_LENGTH = "queue_length", "requests waiting"


class PolicyMode(models.TextChoices):
    AUTOMATIC = "automatic"
    APPROVAL = "approval"


def default_signals() -> list[str]:
    return ["training", "inference_load"]


class ReallocationPolicy(models.Model):
    """How one cluster's training and inference pools lend each other nodes: limits,
    targets, pacing, and whether moves wait for an admin. Off until an admin turns it on."""

    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="+")
    training_pool = models.ForeignKey(
        "clusters.NodePool", on_delete=models.CASCADE, related_name="+"
    )
    inference_pool = models.ForeignKey(
        "clusters.NodePool", on_delete=models.CASCADE, related_name="+"
    )
    enabled = models.BooleanField(default=False)
    mode = models.CharField(max_length=16, choices=PolicyMode.choices, default=PolicyMode.APPROVAL)
    training_min_nodes = models.PositiveIntegerField(default=0)
    training_max_nodes = models.PositiveIntegerField(null=True, blank=True)
    inference_min_nodes = models.PositiveIntegerField(default=1)
    inference_max_nodes = models.PositiveIntegerField(null=True, blank=True)
    inference_target = models.FloatField(default=300.0)
    inference_unit = models.CharField(
        max_length=16, choices=InferenceUnit.choices, default=InferenceUnit.LATENCY_MS
    )
    training_max_wait_s = models.PositiveIntegerField(default=900)
    hysteresis_s = models.PositiveIntegerField(default=600)
    cooldown_s = models.PositiveIntegerField(default=4 * 3600)
    max_moves_per_hour = models.PositiveIntegerField(default=64)
    allow_checkpoint_requeue = models.BooleanField(default=False)
    stale_after_s = models.PositiveIntegerField(default=300)
    # The signals the policy needs (demand.rules.Signal values): one of them missing or
    # stale holds every move.
    signals = models.JSONField(default=default_signals)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    updated_at = models.DateTimeField(default=timezone.now)
    # The latest decision pass, whatever it concluded: when, and its sentence (a hold's
    # reason among them), for the policy page. The history is DemandDecision's.
    checked_at = models.DateTimeField(null=True, blank=True)
    checked_rule = models.CharField(max_length=32, blank=True)
    checked_sentence = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["cluster__name", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "training_pool", "inference_pool"], name="one_policy_per_pair"
            )
        ]

    def __str__(self) -> str:
        return f"{self.training_pool.name} ↔ {self.inference_pool.name} on {self.cluster.name}"

    def audited_values(self) -> dict:
        return {name: getattr(self, name) for name in AUDITED_FIELDS}


AUDITED_FIELDS = (
    "enabled",
    "mode",
    "training_min_nodes",
    "training_max_nodes",
    "inference_min_nodes",
    "inference_max_nodes",
    "inference_target",
    "inference_unit",
    "training_max_wait_s",
    "hysteresis_s",
    "cooldown_s",
    "max_moves_per_hour",
    "allow_checkpoint_requeue",
    "stale_after_s",
    "signals",
)


class ReallocationPolicyChange(models.Model):
    """Append-only audit of a reallocation policy: its values before and after, who, when."""

    policy = models.ForeignKey(ReallocationPolicy, on_delete=models.CASCADE, related_name="changes")
    before = models.JSONField(default=dict, blank=True)  # {} when the policy was created
    after = models.JSONField(default=dict)
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    changed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-changed_at", "-id"]

    def __str__(self) -> str:
        return f"policy {self.policy_id} changed at {self.changed_at:%Y-%m-%d %H:%M}"

    def changed_fields(self) -> list[tuple[str, object, object]]:
        """(field, before, after) for each audited value that differs, in a fixed order."""
        return [
            (name, self.before.get(name), self.after.get(name))
            for name in AUDITED_FIELDS
            if self.before.get(name) != self.after.get(name)
        ]


class DecisionOutcome(models.TextChoices):
    MOVED = "moved", "moved nodes"
    PROPOSED = "proposed", "proposed moves"
    HELD = "held", "held"
    REFUSED = "refused", "refused (breaker or busy)"


class DemandDecision(models.Model):
    """Append-only: what a decision pass concluded for a policy, the rule that fired, the
    evidence and the sentence. A pass that concludes what the last one did writes no row
    (a steady hold is one row, with the time it was last confirmed on the policy)."""

    policy = models.ForeignKey(
        ReallocationPolicy, on_delete=models.CASCADE, related_name="decisions"
    )
    at = models.DateTimeField(default=timezone.now, db_index=True)
    outcome = models.CharField(max_length=16, choices=DecisionOutcome.choices)
    rule = models.CharField(max_length=32)
    sentence = models.CharField(max_length=500)
    evidence = models.JSONField(default=dict, blank=True)
    # The runs it started, by id, and what became of each move: {node: "run 12" or why not}.
    runs = models.JSONField(default=list, blank=True)
    moves = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.outcome} ({self.rule}) at {self.at:%Y-%m-%d %H:%M}: {self.sentence}"
