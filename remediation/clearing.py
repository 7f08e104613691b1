"""Cleared before acted on: a fault whose check passes again is closed with no action.

A health check can fail once and pass on its next run (a link that flapped, a busy GPU
that missed a deadline). Users of other tools ask for such a fault to be cancelled
when a later result shows it gone (NVSentinel #1252). Medbay closes the incident as
cleared, and cancels its run, only while nothing irreversible has been done: the run
waits for approval, or has not yet acted on Slurm (no step has started). Once a step
has run (a drain, a signal, a requeue, a replace), the run goes on, as the node is no
longer as it was; an admin can still release it.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from health.models import CheckStatus, EventKind, HealthEvent, Incident
from remediation import services
from remediation.models import Remediation, RemediationStep, StepOutcome
from remediation.transitions import RunStatus

# Only a recent failure is cleared by a pass: an old incident is history.
CLEARS_WITHIN = timedelta(hours=1)
NOT_YET_ACTED = (RunStatus.AWAITING_APPROVAL, RunStatus.PROPOSED, RunStatus.RUNNING)
ACTED = (StepOutcome.STARTED, StepOutcome.SUCCEEDED, StepOutcome.WAITING)


def on_checks_passed(node_id: int, passed: list[tuple[str, int | None]]) -> None:
    """Health ingestion's listener: close the node's incidents that these passes clear."""
    now = timezone.now()
    for name, gpu in passed:
        for incident in _cleared_by(node_id, name, gpu, now):
            clear(incident, f"check {name} passed again at {now:%H:%M:%S}", now=now)


def _cleared_by(node_id: int, name: str, gpu: int | None, now) -> list[Incident]:
    """Open incidents of the node made only of this check's failures, on this GPU."""
    failing = HealthEvent.objects.filter(
        node_id=node_id, kind=EventKind.CHECK, status=CheckStatus.FAIL, check_name=name
    )
    candidates = Incident.objects.filter(
        node_id=node_id,
        cleared_at__isnull=True,
        last_event_at__gte=now - CLEARS_WITHIN,
        pk__in=failing.values("incident_id"),
    )
    if gpu is not None:
        candidates = candidates.filter(gpu_index=gpu)
    cleared = []
    for incident in candidates:
        others = incident.events.exclude(kind=EventKind.CHECK, check_name=name)
        if not incident.xids and not others.filter(severity__in=["warning", "critical"]).exists():
            cleared.append(incident)
    return cleared


def clear(incident: Incident, why: str, *, now) -> bool:
    """Close the incident as cleared and cancel its run, unless the run already acted."""
    with transaction.atomic():
        run = Remediation.objects.filter(incident=incident).order_by("-pk").first()
        if run is not None and run.is_active and not _cancel_unacted(run, why):
            return False
        updated = Incident.objects.filter(pk=incident.pk, cleared_at__isnull=True).update(
            cleared_at=now,
            cleared_reason=f"cleared with no action: {why}"[:255],
            decision_due=False,
            decide_after=None,
        )
    return bool(updated)


def _cancel_unacted(run: Remediation, why: str) -> bool:
    if run.status not in NOT_YET_ACTED:
        return False
    if run.claimed_until is not None and run.claimed_until > timezone.now():
        return False  # a worker holds it and may be acting right now
    if RemediationStep.objects.filter(remediation=run, outcome__in=ACTED).exists():
        return False
    message = f"cleared before anything was done: {why}"
    # Guarded by the lease as read: a worker that claims it meanwhile wins.
    guard = {"claimed_by": run.claimed_by}
    return services.transition(
        run, RunStatus.CANCELLED, message=message, actor="policy", guard=guard
    )


def register() -> None:
    from health.ingest import passed_check_listeners

    if on_checks_passed not in passed_check_listeners:
        passed_check_listeners.append(on_checks_passed)
