from __future__ import annotations

import enum
import hashlib
import secrets
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import models
from django.utils import timezone

from agent import schema
from agent import xid as catalogue
from agent.checks import base as checks

if TYPE_CHECKING:
    from clusters.models import Node


def _choices(values: type[enum.StrEnum]) -> type[models.TextChoices]:
    """Django choices for an enum the agent's code defines, member for member, labels alike."""
    return models.TextChoices(values.__name__, [(member.name, member.value) for member in values])


# Defined once, without Django, where the agent and the event schema use them.
Severity = _choices(catalogue.Severity)
EventKind = _choices(schema.EventKind)
CheckStatus = _choices(checks.CheckStatus)


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class NodeToken(models.Model):
    """A node agent's credential: bound to one node, stored only as a hash."""

    node = models.ForeignKey("clusters.Node", on_delete=models.CASCADE, related_name="agent_tokens")
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.node.name} agent token {self.prefix}…"

    @classmethod
    def issue(cls, node: Node, *, created_by=None) -> tuple[NodeToken, str]:
        """Revoke the node's current tokens and return a new one with its raw value."""
        raw = f"mbn_{secrets.token_urlsafe(32)}"
        now = timezone.now()
        cls.objects.filter(node=node, revoked_at__isnull=True).update(revoked_at=now)
        token = cls.objects.create(
            node=node, token_hash=hash_token(raw), prefix=raw[4:12], created_by=created_by
        )
        return token, raw


class FaultGroupKind(models.TextChoices):
    JOB = "job", "the job's own fault"
    PART = "part", "a shared part's fault"
    MANUAL = "manual", "grouped by an admin"


class FaultGroup(models.Model):
    """Incidents on several nodes that are one fault (a job's crash on every rank, a leaf
    switch's failure): decided once, for the job or the part, instead of once per node."""

    kind = models.CharField(max_length=8, choices=FaultGroupKind.choices)
    cluster = models.ForeignKey(
        "clusters.Cluster", on_delete=models.CASCADE, related_name="fault_groups"
    )
    # The job whose own fault it is (kind job): Slurm's id in the cluster.
    slurm_job_id = models.BigIntegerField(null=True, blank=True)
    job_user = models.CharField(max_length=64, blank=True)
    # The part the nodes share (kind part), e.g. "switch leaf3", "rack r12".
    part = models.CharField(max_length=128, blank=True)
    # Whether the circuit breaker let the part's drains through (it counts a part once).
    admitted = models.BooleanField(null=True)
    # An admin split the group: its incidents are decided node by node again.
    split_at = models.DateTimeField(null=True, blank=True)
    split_by = models.CharField(max_length=150, blank=True)
    # How it was grouped: the rule and the window it was read with.
    rule = models.CharField(max_length=255)
    window_s = models.FloatField()
    opened_at = models.DateTimeField()
    summary = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["cluster", "slurm_job_id"])]

    def __str__(self) -> str:
        return f"fault group {self.pk} ({self.kind})"


class Incident(models.Model):
    """A burst of related events on one GPU (or node) with under 3 minutes of silence."""

    node = models.ForeignKey("clusters.Node", on_delete=models.CASCADE, related_name="incidents")
    gpu_index = models.PositiveSmallIntegerField(null=True, blank=True)
    opened_at = models.DateTimeField()
    last_event_at = models.DateTimeField()
    severity = models.CharField(max_length=16, choices=Severity.choices, default=Severity.INFO)
    xids = models.JSONField(default=list, blank=True)
    event_count = models.PositiveIntegerField(default=0)
    summary = models.CharField(max_length=255, blank=True)
    # Set when a report opens the incident or changes its XIDs or severity; cleared once
    # the remediation trigger has decided it as it then stood (remediation.admission).
    decision_due = models.BooleanField(default=False)
    # A decision that raised is retried with backoff (`decide_after`); after a few
    # failures the incident stops waiting and says why (`decision_error`), so that one
    # bad record never stops the decisions about every other incident.
    decision_failures = models.PositiveSmallIntegerField(default=0)
    decide_after = models.DateTimeField(null=True, blank=True)
    decision_error = models.CharField(max_length=500, blank=True)
    # Set when the incident is one node's share of a fault on several (FaultGroup): it is
    # decided with its group, and counts toward no node's flapping, lemon or MTBF figures.
    group = models.ForeignKey(
        FaultGroup, null=True, blank=True, on_delete=models.SET_NULL, related_name="incidents"
    )
    # Closed with no action: the failed check passed again before anything irreversible
    # was done (remediation.clearing); the reason says so.
    cleared_at = models.DateTimeField(null=True, blank=True)
    cleared_reason = models.CharField(max_length=255, blank=True)

    class Meta:
        ordering = ["-last_event_at"]
        indexes = [
            models.Index(fields=["node", "gpu_index", "last_event_at"]),
            models.Index(
                fields=["decision_due"],
                condition=models.Q(decision_due=True),
                name="health_incident_decision_due",
            ),
        ]

    def __str__(self) -> str:
        return f"incident {self.pk} on {self.node_id}"


class HealthEvent(models.Model):
    """An XID or health-check result; identical repeats fold into one row with a count."""

    node = models.ForeignKey(
        "clusters.Node", on_delete=models.CASCADE, related_name="health_events"
    )
    incident = models.ForeignKey(
        Incident, null=True, blank=True, on_delete=models.SET_NULL, related_name="events"
    )
    kind = models.CharField(max_length=8, choices=EventKind.choices)
    xid = models.PositiveIntegerField(null=True, blank=True, db_index=True)
    gpu_index = models.PositiveSmallIntegerField(null=True, blank=True)
    pci = models.CharField(max_length=16, blank=True)
    check_name = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=8, choices=CheckStatus.choices, blank=True)
    severity = models.CharField(max_length=16, choices=Severity.choices, db_index=True)
    message = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)
    observed_at = models.DateTimeField(db_index=True)
    last_observed_at = models.DateTimeField()
    received_at = models.DateTimeField(default=timezone.now)
    count = models.PositiveIntegerField(default=1)
    fold_key = models.CharField(max_length=64, db_index=True)

    class Meta:
        ordering = ["-last_observed_at", "-id"]
        indexes = [models.Index(fields=["node", "last_observed_at"])]

    def __str__(self) -> str:
        return f"{self.kind} {self.xid or self.check_name} on {self.node_id}"

    @property
    def title(self) -> str:
        if self.kind == EventKind.XID:
            from agent.xid import lookup

            info = lookup(self.xid)
            return f"XID {self.xid}: {info.name}" if info.known else f"unknown XID {self.xid}"
        return f"{self.check_name}: {self.status}"


class HealthEventDay(models.Model):
    """Rollup of fault events (XIDs, failing or warning checks): how many per node and day."""

    node = models.ForeignKey("clusters.Node", on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    kind = models.CharField(max_length=8, choices=EventKind.choices)
    xid = models.PositiveIntegerField(null=True, blank=True)
    check_name = models.CharField(max_length=64, blank=True)
    events = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["day"], name="health_eventday_day")]

    def __str__(self) -> str:
        return f"{self.node_id} {self.day} {self.kind} {self.xid or self.check_name}: {self.events}"


class ReceivedEventId(models.Model):
    """Every event id an agent has sent, so a resent batch is never counted twice."""

    node = models.ForeignKey("clusters.Node", on_delete=models.CASCADE, related_name="+")
    event_id = models.CharField(max_length=128)
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["node", "event_id"], name="unique_agent_event_id")
        ]

    def __str__(self) -> str:
        return self.event_id
