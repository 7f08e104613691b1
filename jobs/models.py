from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone


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


# Leaving RUNNING for one of these throws away the work since the last checkpoint.
INTERRUPTED_STATES = (
    JobState.PENDING,
    JobState.REQUEUED,
    JobState.NODE_FAIL,
    JobState.PREEMPTED,
    JobState.FAILED,
    JobState.TIMEOUT,
    JobState.OUT_OF_MEMORY,
    JobState.BOOT_FAIL,
    JobState.DEADLINE,
)
# The state changes that can hold lost work or a recovery: into an interruption (a
# job's first row, PENDING from nothing, is not one) or a restart. Few jobs have any,
# so the reports' windows over a job's history read only those jobs (see the partial
# index on JobStateChange).
INTERRUPTION = models.Q(to_state__in=INTERRUPTED_STATES) & ~models.Q(
    to_state=JobState.PENDING, from_state=""
) | models.Q(restart_count__gt=0)


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

    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="jobs")
    slurm_id = models.BigIntegerField()
    name = models.CharField(max_length=255, blank=True)
    user = models.CharField(max_length=64, blank=True, db_index=True)
    account = models.CharField(max_length=64, blank=True)
    partition = models.CharField(max_length=64, blank=True)
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.PENDING)
    reason = models.CharField(max_length=255, blank=True)
    nodes = models.ManyToManyField("clusters.Node", blank=True, related_name="jobs")
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
    # What the portal submitted (empty for jobs submitted outside Medbay).
    script = models.TextField(blank=True)
    params = models.JSONField(default=dict, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)
    # Slurm reuses job ids (after MaxJobId wraps, or a controller that lost its
    # state): a later job with this id got a row of its own, and this one keeps
    # its history, script and submitter.
    superseded = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "slurm_id"],
                condition=models.Q(superseded=False),
                name="one_current_job_per_slurm_id",
            )
        ]
        indexes = [
            models.Index(fields=["state"]),
            # Every row with an id, superseded ones too (the unique index above is
            # partial): the accounting import matches its records by this.
            models.Index(fields=["cluster", "slurm_id"], name="jobs_job_cluster_slurm_id"),
        ]
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
    # The nodes the job held: for a restart, the ones it ran on before the requeue.
    node_names = models.JSONField(default=list, blank=True)
    at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["job", "at"]),
            # The reports' Lead() window over a job's history reads in this order.
            models.Index(fields=["job", "at", "id"], name="jobs_change_job_at_id"),
            models.Index(fields=["at"], condition=INTERRUPTION, name="jobs_change_interrupted"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.from_state} -> {self.to_state}"


class JobDay(models.Model):
    """Rollup of job history: GPU-seconds allocated to RUNNING jobs on one UTC day."""

    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    partition = models.CharField(max_length=64, blank=True)
    account = models.CharField(max_length=64, blank=True)
    user = models.CharField(max_length=64, blank=True)
    gpu_seconds = models.FloatField(default=0.0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "day", "partition", "account", "user"], name="jobs_day_unique"
            ),
        ]
        indexes = [models.Index(fields=["day"], name="jobs_day_day")]

    def __str__(self) -> str:
        return f"{self.day} {self.partition}/{self.account}/{self.user}: {self.gpu_seconds:.0f}"


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class NotificationKind(models.TextChoices):
    """What a notification is about; a person picks channels per kind (TEST excepted)."""

    FAULT = "fault", "Fault on my job"
    RESTARTED = "restarted", "Restarted"
    REQUEUED = "requeued", "Requeued"
    FINISHED = "finished", "Finished after a restart"
    ACTION = "action", "Needs my action"
    TEST = "test", "Test"


def all_notification_kinds() -> list[str]:
    return [kind.value for kind in NotificationKind if kind != NotificationKind.TEST]


class ResearcherProfile(models.Model):
    """How a portal account maps onto the cluster: Unix user, account, notifications."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="researcher_profile"
    )
    unix_user = models.CharField(
        max_length=32, blank=True, db_index=True, help_text="Empty: the portal username."
    )
    default_account = models.CharField(max_length=64, blank=True)
    # Any email at all; the preferences page keeps it equal to bool(email_kinds).
    notify_email = models.BooleanField(default=True)
    # The NotificationKind values each channel is used for (jobs.notifications).
    email_kinds = models.JSONField(default=all_notification_kinds, blank=True)
    webhook_kinds = models.JSONField(default=all_notification_kinds, blank=True)
    # Teams' connector addresses run past Django's 200 characters.
    webhook_url = models.URLField(
        max_length=1000, blank=True, help_text="Slack or Teams incoming webhook."
    )
    notifications_opt_out = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"{self.user} as {self.unix_user or self.user}"

    def wants(self, kind: str, channel: str) -> bool:
        """Whether this person chose CHANNEL ("email" or "webhook") for KIND."""
        if self.notifications_opt_out:
            return False
        if channel == "email":
            return self.notify_email and kind in (self.email_kinds or [])
        return bool(self.webhook_url) and kind in (self.webhook_kinds or [])


class DeliveryOutcome(models.TextChoices):
    """How one delivery ended; REFUSED: Medbay would not send to that address."""

    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"
    REFUSED = "refused", "Refused"


class NotificationDelivery(models.Model):
    """Append-only: one email or webhook message sent (or not) to a person, and how it went."""

    class Channel(models.TextChoices):
        EMAIL = "email", "Email"
        WEBHOOK = "webhook", "Webhook"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_deliveries"
    )
    at = models.DateTimeField(default=timezone.now)
    kind = models.CharField(max_length=16, choices=NotificationKind.choices)
    channel = models.CharField(max_length=8, choices=Channel.choices)
    # A webhook's address without its path: Slack's and Teams' paths are the secret.
    destination = models.CharField(max_length=300)
    outcome = models.CharField(max_length=16, choices=DeliveryOutcome.choices)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["user", "at"], name="jobs_delivery_user_at")]

    def __str__(self) -> str:
        return f"{self.kind} by {self.channel} to {self.user}: {self.outcome}"

    @property
    def failed(self) -> bool:
        return self.outcome != DeliveryOutcome.DELIVERED


class JobToken(models.Model):
    """The credential a running job reports progress with; dead once the job ends."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="tokens")
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8)
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"job {self.job.slurm_id} token {self.prefix}…"

    @staticmethod
    def new_raw() -> str:
        return f"mbj_{secrets.token_urlsafe(32)}"

    @classmethod
    def store(cls, job: Job, raw: str) -> JobToken:
        return cls.objects.create(job=job, token_hash=hash_token(raw), prefix=raw[4:12])


class JobProgress(models.Model):
    """One progress report from a running job (step, checkpoint, which attempt)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="progress_reports")
    step = models.PositiveBigIntegerField()
    checkpoint_saved = models.BooleanField(default=False)
    restart_count = models.PositiveIntegerField(default=0)
    reported_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-reported_at", "-id"]
        indexes = [models.Index(fields=["job", "reported_at"])]

    def __str__(self) -> str:
        return f"job {self.job_id} step {self.step}"


class JobTemplate(models.Model):
    """A researcher's saved job form, reusable for new submissions."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="job_templates"
    )
    name = models.CharField(max_length=64)
    params = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "name"], name="unique_job_template_name")
        ]

    def __str__(self) -> str:
        return f"{self.owner}: {self.name}"


class AccountingJob(models.Model):
    """One finished job attempt from Slurm's accounting (sacct), matched to Medbay's Job.

    Imported, never edited by Medbay: a record is named by (cluster, Slurm id,
    submit time), since Slurm reuses ids and gives each attempt of a requeued
    job its own record and submit time. `job` is Medbay's own row for it, empty
    for jobs Medbay never saw (from before it was installed).
    """

    cluster = models.ForeignKey(
        "clusters.Cluster", on_delete=models.CASCADE, related_name="accounting_jobs"
    )
    slurm_id = models.BigIntegerField()
    submit_at = models.DateTimeField()
    job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="accounting_records"
    )
    name = models.CharField(max_length=255, blank=True)
    user = models.CharField(max_length=64, blank=True)
    account = models.CharField(max_length=64, blank=True)
    partition = models.CharField(max_length=64, blank=True)
    qos = models.CharField(max_length=64, blank=True)
    state = models.CharField(max_length=16, choices=JobState.choices)
    start_at = models.DateTimeField(null=True, blank=True)
    end_at = models.DateTimeField(db_index=True)
    elapsed_s = models.PositiveBigIntegerField(default=0)
    gpus = models.PositiveIntegerField(default=0)  # allocated gres/gpu
    node_names = models.JSONField(default=list, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    # Requeues before this attempt: Slurm's restart_cnt (23.02+), else the REQUEUED
    # attempts of the same job id just before it.
    restarts = models.PositiveIntegerField(default=0)
    imported_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "slurm_id", "submit_at"],
                name="one_accounting_record_per_attempt",
            )
        ]
        indexes = [models.Index(fields=["cluster", "end_at"])]
        ordering = ["-end_at", "-slurm_id"]

    def __str__(self) -> str:
        return f"accounting record of job {self.slurm_id} ({self.state})"


class AccountingImport(models.Model):
    """Append-only: one committed window of the accounting import and what it stored.

    The import resumes from the latest window's end, so a crash between windows
    loses nothing and a window read twice stores nothing twice.
    """

    cluster = models.ForeignKey(
        "clusters.Cluster", on_delete=models.CASCADE, related_name="accounting_imports"
    )
    since = models.DateTimeField()
    until = models.DateTimeField()
    records = models.PositiveIntegerField(default=0)
    matched = models.PositiveIntegerField(default=0)  # records tied to one of Medbay's jobs
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-until", "-id"]
        indexes = [models.Index(fields=["cluster", "until"])]

    def __str__(self) -> str:
        return f"{self.cluster_id}: {self.since:%Y-%m-%d %H:%M} to {self.until:%Y-%m-%d %H:%M}"


class ClusterAccount(models.Model):
    """A researcher's Unix account on one cluster: where the job form lets them submit.

    The environment's (default) cluster keeps using ResearcherProfile.unix_user, as
    before several clusters; every other cluster needs a row here."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="cluster_accounts"
    )
    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="+")
    unix_user = models.CharField(max_length=32)
    default_account = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "cluster"], name="one_account_per_cluster"),
            # One Unix account is one person on a cluster, as ResearcherProfile keeps it.
            models.UniqueConstraint(
                fields=["cluster", "unix_user"], name="one_person_per_unix_account"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} as {self.unix_user} on {self.cluster}"
