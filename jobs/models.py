from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from clusters.models import Cluster, Node


class JobState(models.TextChoices):
    """Slurm's job states, spelled as Slurm prints them."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    CONFIGURING = "CONFIGURING"
    REQUEUED = "REQUEUED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"


ACTIVE_JOB_STATES = (
    JobState.PENDING,
    JobState.RUNNING,
    JobState.SUSPENDED,
    JobState.COMPLETING,
    JobState.CONFIGURING,
    JobState.REQUEUED,
)


class Job(models.Model):
    """A Slurm job as last reconciled, with its restart count."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="jobs")
    slurm_id = models.BigIntegerField()
    name = models.CharField(max_length=255, blank=True)
    user = models.CharField(max_length=64, blank=True, db_index=True)
    account = models.CharField(max_length=64, blank=True)
    partition = models.CharField(max_length=64, blank=True)
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.PENDING)
    reason = models.CharField(max_length=255, blank=True)
    nodes = models.ManyToManyField(Node, blank=True, related_name="jobs")
    node_names = models.JSONField(default=list, blank=True)
    node_count = models.PositiveIntegerField(default=0)
    gpus = models.PositiveIntegerField(default=0)
    submit_at = models.DateTimeField(null=True, blank=True)
    start_at = models.DateTimeField(null=True, blank=True)
    end_at = models.DateTimeField(null=True, blank=True)
    eligible_at = models.DateTimeField(null=True, blank=True)
    restart_count = models.PositiveIntegerField(default=0)
    requeue = models.BooleanField(default=True)
    exit_code = models.IntegerField(null=True, blank=True)
    time_limit_minutes = models.PositiveIntegerField(null=True, blank=True)
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "slurm_id"], name="unique_slurm_job")
        ]
        indexes = [models.Index(fields=["state"])]
        ordering = ["-slurm_id"]

    def __str__(self) -> str:
        return f"job {self.slurm_id}"

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_JOB_STATES


class JobStateChange(models.Model):
    """Append-only history of a job's state: from, to, why, who, when."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="state_changes")
    from_state = models.CharField(max_length=16, choices=JobState.choices, blank=True)
    to_state = models.CharField(max_length=16, choices=JobState.choices)
    reason = models.CharField(max_length=255, blank=True)
    actor = models.CharField(max_length=128, default="slurm")
    restart_count = models.PositiveIntegerField(default=0)
    at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["job", "at"])]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.from_state} -> {self.to_state}"
