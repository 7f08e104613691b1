from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from remediation.transitions import ACTIVE, RunStatus

# The remediation tables were created by the clusters app (clusters/migrations) and keep
# its label, so moving the engine to its own package renamed no table.
APP_LABEL = "clusters"


class Action(models.TextChoices):
    NOTIFY = "notify"
    RESTART_APP = "restart_app", "Restart jobs"
    CORDON = "cordon"
    UNCORDON = "uncordon"
    DRAIN = "drain"
    RESET_GPU = "reset_gpu", "Reset GPU"
    REBOOT = "reboot"
    REPLACE = "replace"
    TO_INFERENCE = "to_inference", "Move to inference"
    TO_TRAINING = "to_training", "Move to training"
    RETURN_TO_SERVICE = "return_to_service", "Return to service"


def action_words(action: str | None) -> str:
    """An action as it reads mid-sentence: "return to service", "reset GPU", never
    its key ("return_to_service")."""
    if not action:
        return "nothing"
    label = str(Action(action).label) if action in Action.values else str(action)
    return label[:1].lower() + label[1:]


def status_words(status: str) -> str:
    """A run's status as it reads mid-sentence: "awaiting approval"."""
    return str(RunStatus(status).label).lower() if status in RunStatus.values else str(status)


class Trigger(models.TextChoices):
    HEALTH_EVENT = "health_event"
    ADMIN = "admin"
    POLICY = "policy"
    # An admin's request written in Slurm's reason (`scontrol update … reason="Action:Replace"`).
    SLURM = "slurm", "Slurm request"
    # The reallocation policy's move between training and inference (demand/deciding.py).
    DEMAND = "demand"


class Mode(models.TextChoices):
    AUTOMATIC = "automatic"
    APPROVAL = "approval"
    DRY_RUN = "dry_run"


class StepOutcome(models.TextChoices):
    """What a step came to. NEEDS_ATTENTION stops the run for a human (it parks in the
    run status of that name); its step's row records it as FAILED."""

    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    WAITING = "waiting"
    DRY_RUN = "dry_run"
    NEEDS_ATTENTION = "needs_attention"


class Policy(models.Model):
    """What the engine does about one XID code or health check, and whether it asks first."""

    xid = models.PositiveIntegerField(null=True, blank=True, unique=True)
    check_name = models.CharField(max_length=64, blank=True)
    action = models.CharField(max_length=20, choices=Action.choices)
    mode = models.CharField(max_length=16, choices=Mode.choices, default=Mode.APPROVAL)
    enabled = models.BooleanField(default=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        app_label = APP_LABEL
        ordering = ["xid", "check_name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(xid__isnull=False) | ~Q(check_name=""), name="policy_has_a_trigger"
            )
        ]

    def __str__(self) -> str:
        return f"{self.subject} → {self.action} ({self.mode})"

    @property
    def subject(self) -> str:
        return f"XID {self.xid}" if self.xid is not None else f"check {self.check_name}"

    def audited_values(self) -> dict:
        values = (self.subject, self.action, self.mode, self.enabled)
        return dict(zip(AUDITED_POLICY_FIELDS, values, strict=True))


AUDITED_POLICY_FIELDS = ("trigger", "action", "mode", "enabled")


class PolicyChange(models.Model):
    """Append-only audit of a policy: what it said before and after, who changed it."""

    policy = models.ForeignKey(Policy, null=True, on_delete=models.SET_NULL, related_name="changes")
    subject = models.CharField(max_length=80)  # "XID 79" or "check gpu_count", kept verbatim
    before = models.JSONField(default=dict, blank=True)  # {} when the policy was created
    after = models.JSONField(default=dict)
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    changed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        app_label = APP_LABEL
        ordering = ["-changed_at", "-id"]

    def __str__(self) -> str:
        return f"{self.subject} changed at {self.changed_at:%Y-%m-%d %H:%M}"

    def changed_fields(self) -> list[tuple[str, object, object]]:
        """(field, before, after) for each audited value that differs; before is
        None for every field of a newly created policy."""
        # In a fixed order: PostgreSQL's jsonb does not keep the keys' order.
        return [
            (name, self.before.get(name), self.after.get(name))
            for name in AUDITED_POLICY_FIELDS
            if self.before.get(name) != self.after.get(name)
        ]


class Remediation(models.Model):
    """One durable run of an action on a node, advanced step by step by the engine."""

    node = models.ForeignKey("clusters.Node", on_delete=models.CASCADE, related_name="remediations")
    action = models.CharField(max_length=20, choices=Action.choices)
    trigger = models.CharField(max_length=16, choices=Trigger.choices)
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.PROPOSED)
    reason = models.CharField(max_length=255)
    dry_run = models.BooleanField(default=False)
    planned_steps = models.JSONField(default=list)
    current_step = models.PositiveSmallIntegerField(default=0)
    context = models.JSONField(default=dict, blank=True)
    incident = models.ForeignKey(
        "health.Incident", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    policy = models.ForeignKey(Policy, null=True, blank=True, on_delete=models.SET_NULL)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="requested_remediations",
    )
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="approved_remediations",
    )
    decision_comment = models.CharField(max_length=500, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(default=timezone.now)
    due_at = models.DateTimeField(default=timezone.now, db_index=True)
    claimed_by = models.CharField(max_length=64, blank=True)
    claimed_until = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    message = models.CharField(max_length=500, blank=True)
    # A more drastic fault on the node cancelled this run and started that one.
    superseded_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="supersedes"
    )

    class Meta:
        app_label = APP_LABEL
        ordering = ["-created_at", "-id"]
        constraints = [
            # At most one active run per node, enforced by the database itself.
            models.UniqueConstraint(
                fields=["node"],
                condition=Q(status__in=sorted(str(s) for s in ACTIVE)),
                name="one_active_remediation_per_node",
            )
        ]

    def __str__(self) -> str:
        return f"run {self.pk}: {self.action} {self.node_id} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE

    @property
    def step_name(self) -> str:
        if self.current_step < len(self.planned_steps):
            return self.planned_steps[self.current_step]
        return ""

    @property
    def asked_in_slurm(self) -> dict | None:
        """For a run an admin asked for in Slurm's reason: who, when, what they typed,
        how the node was taken out (fail, drain, down) and how its jobs are handled."""
        request = (self.context or {}).get("slurm_request")
        if not request:
            return None
        at = parse_datetime(request.get("at") or "")
        return {**request, "at": at, "handling": self.context.get("job_handling", "")}


class RemediationStep(models.Model):
    """Append-only log of what each step did: started, finished, outcome, message."""

    remediation = models.ForeignKey(Remediation, on_delete=models.CASCADE, related_name="steps")
    index = models.PositiveSmallIntegerField()
    name = models.CharField(max_length=32)
    attempt = models.PositiveSmallIntegerField(default=1)
    outcome = models.CharField(max_length=16, choices=StepOutcome.choices)
    message = models.CharField(max_length=500, blank=True)
    worker = models.CharField(max_length=64, blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = APP_LABEL
        ordering = ["remediation_id", "id"]

    def __str__(self) -> str:
        return f"{self.remediation_id}#{self.index} {self.name}: {self.outcome}"


class JobEffect(models.TextChoices):
    """What a run did to a job, in the order a recovery does them."""

    SIGNALLED = "signalled", "signalled to checkpoint"
    REQUEUED = "requeued"
    CANCELLED = "cancelled"
    RELEASED = "released", "released to start again"


class RemediationJob(models.Model):
    """Append-only: a run acted on a job. What explains a job's restart reads these.

    The job is named by its Slurm id (and the run's node's cluster), not by a
    foreign key: the engine acts on jobs that the sync may not have stored yet,
    and a run's record must not depend on the jobs app.
    """

    remediation = models.ForeignKey(
        Remediation, on_delete=models.CASCADE, related_name="job_effects"
    )
    slurm_job_id = models.BigIntegerField(db_index=True)
    effect = models.CharField(max_length=16, choices=JobEffect.choices)
    # The nodes the job held when the run acted on it.
    nodes = models.JSONField(default=list, blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        app_label = APP_LABEL
        ordering = ["at", "id"]
        constraints = [
            # A step re-run after a crash records what it already did only once.
            models.UniqueConstraint(
                fields=["remediation", "slurm_job_id", "effect"], name="one_effect_per_run_job"
            )
        ]

    def __str__(self) -> str:
        return f"run {self.remediation_id} {self.effect} job {self.slurm_job_id}"


class RemediationStatusChange(models.Model):
    """Append-only history of a run's status: from, to, why, who, when."""

    remediation = models.ForeignKey(
        Remediation, on_delete=models.CASCADE, related_name="status_changes"
    )
    from_status = models.CharField(max_length=20, choices=RunStatus.choices, blank=True)
    to_status = models.CharField(max_length=20, choices=RunStatus.choices)
    message = models.CharField(max_length=500, blank=True)
    actor = models.CharField(max_length=128, default="engine")
    at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        app_label = APP_LABEL
        ordering = ["remediation_id", "at", "id"]

    def __str__(self) -> str:
        return f"{self.remediation_id}: {self.from_status} -> {self.to_status}"


class BreakerTrip(models.Model):
    """A circuit-breaker opening: automatic remediation paused until it closes."""

    # The breaker is per cluster: two clusters may each have a partition "train", and a
    # storm on one must neither open nor hold the other's (nor reuse its open trip).
    cluster = models.ForeignKey(
        "clusters.Cluster", on_delete=models.CASCADE, related_name="breaker_trips"
    )
    partition = models.CharField(max_length=64, blank=True)
    opened_at = models.DateTimeField(default=timezone.now)
    closed_at = models.DateTimeField(null=True, blank=True)
    reason = models.CharField(max_length=255)
    suppressed = models.PositiveIntegerField(default=0)

    class Meta:
        app_label = APP_LABEL
        ordering = ["-opened_at"]

    def __str__(self) -> str:
        scope = self.partition or "cluster"
        return f"breaker {self.cluster_id}/{scope} {self.opened_at:%Y-%m-%d %H:%M}"


class BreakerRefusal(models.Model):
    """One automatic trigger an open breaker dropped: the incident, its node, and why."""

    trip = models.ForeignKey(BreakerTrip, on_delete=models.CASCADE, related_name="refusals")
    incident = models.ForeignKey(
        "health.Incident", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    node = models.ForeignKey("clusters.Node", on_delete=models.CASCADE, related_name="+")
    action = models.CharField(max_length=20, choices=Action.choices)
    reason = models.CharField(max_length=255)
    at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        app_label = APP_LABEL
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"refused {self.action} on {self.node_id}: {self.reason}"


class SlurmRequest(models.Model):
    """A request an admin wrote in a node's Slurm reason (`Action:Replace`), as the sync
    first saw it, and what Medbay made of it: the run it started, or why it refused.

    One row per request: the node, the words and the time Slurm gives the reason (its
    `reason_changed_at`) are its key, so the many sync cycles that see one request make
    one row, and the same words set again later are a new request.
    """

    node = models.ForeignKey("clusters.Node", on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=600)  # the words and Slurm's time for them
    text = models.CharField(max_length=512)  # the reason as the admin typed it
    word = models.CharField(max_length=64)  # the request word it starts with
    action = models.CharField(max_length=20, choices=Action.choices, blank=True)
    form = models.CharField(max_length=8)  # how the node was taken out: fail, drain or down
    requested_by = models.CharField(max_length=64, blank=True)  # Slurm's reason_set_by_user
    requested_at = models.DateTimeField(null=True, blank=True)  # Slurm's reason time
    seen_at = models.DateTimeField(default=timezone.now, db_index=True)
    run = models.ForeignKey(
        Remediation, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    refusal = models.CharField(max_length=255, blank=True)  # why no run was started
    answer = models.CharField(max_length=255, blank=True)  # the last reason Medbay wrote
    settled = models.BooleanField(default=False)  # Medbay's last word is written

    class Meta:
        app_label = APP_LABEL
        ordering = ["-seen_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["node", "key"], name="one_row_per_request")]
        indexes = [models.Index(fields=["settled"], name="slurm_request_unsettled")]

    def __str__(self) -> str:
        return f"{self.word} on {self.node_id} by {self.requested_by or '?'}"

    @property
    def who_and_when(self) -> str:
        """`root 09:15`: who set the reason in Slurm, and when (local time)."""
        at = timezone.localtime(self.requested_at).strftime("%H:%M") if self.requested_at else ""
        return " ".join(part for part in (self.requested_by, at) if part)
