"""Tells a job's owner what Medbay did to their job, by the channels they chose.

The remediation engine calls `notify_remediation_effect` after it has acted on a
job. Each person picks, per kind of event (NotificationKind), email and their
webhook on /account/notifications/ (ResearcherProfile.email_kinds and
webhook_kinds); everything sent, failed or refused leaves a NotificationDelivery
row that the page shows them. Delivery is best effort: a broken mail server or
webhook is recorded and logged, never raised into the engine's step, which must
stay idempotent and quick.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.utils import timezone

from jobs import webhooks
from jobs.access import profile_for_unix_user
from jobs.models import (
    DeliveryOutcome,
    NotificationDelivery,
    NotificationKind,
    ResearcherProfile,
    all_notification_kinds,
)
from jobs.queries import job_url

logger = logging.getLogger(__name__)

EFFECTS = ("signalled", "requeued", "restarted", "cancelled")
# A cancelled job needs its owner: Medbay could not requeue it, so only a
# resubmission runs it again. A signal to checkpoint means a fault under the job.
KIND_OF_EFFECT = {
    "signalled": NotificationKind.FAULT,
    "requeued": NotificationKind.REQUEUED,
    "restarted": NotificationKind.RESTARTED,
    "cancelled": NotificationKind.ACTION,
}
# "Send a test" makes the portal post wherever the person says: a few a minute.
TEST_SENDS_PER_MINUTE = 5
PAGE_URL = "/account/notifications/"
Channel = NotificationDelivery.Channel

_VERBS = {
    "signalled": "was sent USR1 to checkpoint",
    "requeued": "was requeued",
    "restarted": "restarted",
    "cancelled": "was cancelled",
}


class TestNotSent(Exception):
    """Why "send a test" sent nothing, in words for the person."""


def notify_remediation_effect(job, *, what: str, remediation) -> None:
    """Tell the job's owner what the remediation did, by the channels they chose."""
    if what not in EFFECTS:
        raise ValueError(f"what must be one of {', '.join(EFFECTS)}, not {what!r}")
    subject, text = message_for(job, what, remediation)
    notify_owner(job, KIND_OF_EFFECT[what], subject, text)


def notify_job_finished(job) -> None:
    """Tell the owner that a job Medbay restarted has ended; call it once per ending."""
    if not job.restart_count or job.is_active:
        return
    times = "once" if job.restart_count == 1 else f"{job.restart_count} times"
    subject = f"[Medbay] Job {job.slurm_id} ({job.name or 'unnamed'}) finished after a restart"
    text = (
        f"Your job {job.slurm_id} ended {job.state} after being restarted {times}.\n"
        f"Details: {_portal_url()}{job_url(job)}"
    )
    notify_owner(job, NotificationKind.FINISHED, subject, text)


def notify_jobs_finished(job_pks: list[int]) -> None:
    """The sync's listener: jobs that ended after a restart (a failure is logged; the
    cycle that saw them has committed and must not fail for a mail server)."""
    from jobs.models import Job

    for job in Job.objects.filter(pk__in=job_pks).select_related("submitted_by"):
        try:
            notify_job_finished(job)
        except Exception:
            logger.exception("Could not tell the owner of job %s it finished", job.slurm_id)


def notify_job_fault(job, *, summary: str) -> None:
    """Tell the owner, once, that their job's own fault stopped it (a fault group)."""
    subject = f"[Medbay] Job {job.slurm_id} ({job.name or 'unnamed'}) hit a fault of its own"
    text = (
        f"Your job {job.slurm_id}: {summary}. Medbay took no node out of service for it;"
        " its error output says what went wrong.\n"
        f"Details: {_portal_url()}{job_url(job)}"
    )
    notify_owner(job, NotificationKind.FAULT, subject, text)


def notify_owner(job, kind: str, subject: str, text: str) -> None:
    """Send SUBJECT and TEXT to the job's owner by each channel they chose for KIND."""
    recipient = owner_of(job)
    if recipient is None:
        logger.info(
            "No portal user for job %s (unix user %r); not notified", job.slurm_id, job.user
        )
        return
    user, profile = recipient
    # Someone who never saved preferences gets email, as before there were any.
    if user.email and (profile is None or profile.wants(kind, Channel.EMAIL)):
        send_email(user, kind, subject, text, job=job)
    if profile is not None and profile.wants(kind, Channel.WEBHOOK):
        send_webhook(user, kind, profile.webhook_url, f"{subject}\n{text}", job=job)


def owner_of(job):
    """(user, profile or None) for the job: who submitted it, else whose unix user it is."""
    if job.submitted_by_id is not None:
        user = job.submitted_by
        return user, (user.researcher_profile if _has_profile(user) else None)
    profile = profile_for_unix_user(job.user)
    if profile is not None:
        return profile.user, profile
    # No mapping names this Unix user: someone whose username is the Unix user, unless
    # their own profile maps them to a different Unix account.
    user = get_user_model().objects.filter(username=job.user).first() if job.user else None
    if user is None:
        return None
    profile = getattr(user, "researcher_profile", None) if _has_profile(user) else None
    if profile is not None and profile.unix_user not in ("", job.user):
        return None
    return user, profile


def _has_profile(user) -> bool:
    return ResearcherProfile.objects.filter(user=user).exists()


def message_for(job, what: str, remediation) -> tuple[str, str]:
    subject = f"[Medbay] Job {job.slurm_id} ({job.name or 'unnamed'}) {_VERBS[what]}"
    node = getattr(getattr(remediation, "node", None), "name", "") if remediation else ""
    lines = [f"Your job {job.slurm_id} {_VERBS[what]} by Medbay's remediation"]
    if remediation is not None:
        lines[0] += f" ({remediation.get_action_display().lower()} of {node})"
        if remediation.reason:
            lines.append(f"Why: {remediation.reason}")
    lines[0] += "."
    if what in ("requeued", "restarted"):
        lines.append("If it writes checkpoints it resumes from its last one.")
    if what == "cancelled":
        lines.append("It will not run again unless you resubmit it.")
    lines.append(f"Details: {_portal_url()}{job_url(job)}")
    return subject, "\n".join(lines)


def _portal_url() -> str:
    return settings.MEDBAY_PORTAL_URL.rstrip("/")


def send_email(user, kind: str, subject: str, text: str, *, job=None) -> NotificationDelivery:
    error = _send_email(user.email, subject, text)
    outcome = DeliveryOutcome.FAILED if error else DeliveryOutcome.DELIVERED
    return _record(user, kind, Channel.EMAIL, user.email, job, outcome=outcome, error=error)


def _send_email(address: str, subject: str, text: str) -> str:
    """Hand the message to the mail server; the error in words, or "" when it took it."""
    try:
        send_mail(subject, text, None, [address])
    except Exception as error:  # SMTP failures of any kind must not break a remediation step
        logger.warning("Email to %s not delivered", address, exc_info=True)
        return str(error) or type(error).__name__
    return ""


def send_webhook(user, kind: str, url: str, text: str, *, job=None) -> NotificationDelivery:
    result = _post(url, text)
    if result.delivered:
        outcome = DeliveryOutcome.DELIVERED
    else:
        outcome = DeliveryOutcome.REFUSED if result.refused else DeliveryOutcome.FAILED
    return _record(
        user,
        kind,
        Channel.WEBHOOK,
        webhooks.describe(url),
        job,
        outcome=outcome,
        status=result.status,
        error=result.error,
    )


def post_webhook(url: str, text: str) -> bool:
    """POST `{"text": ...}` and say whether it was accepted.

    One JSON body with "text" is what Slack incoming webhooks and Teams' (legacy)
    connectors both read. Addresses outside the public internet are refused unless
    the site allows them, and redirects are not followed (jobs.webhooks).
    """
    return _post(url, text).delivered


def _post(url: str, text: str) -> webhooks.Result:
    result = webhooks.post_json(url, {"text": text})
    if not result.delivered:
        # Never the whole address: its path is the webhook's secret.
        logger.warning("Webhook to %s not delivered: %s", webhooks.describe(url), result.error)
    return result


def _record(user, kind, channel, destination, job, *, outcome, status=None, error=""):
    return NotificationDelivery.objects.create(
        user=user,
        kind=kind,
        channel=channel,
        destination=destination[:300],
        outcome=outcome,
        status_code=status,
        error=error[:500],
        job=job if getattr(job, "pk", None) else None,
    )


# ---------------------------------------------------------------- the preferences page


def preferences_of(user) -> dict:
    """The person's choices as the preferences form takes them (defaults: no profile)."""
    profile = ResearcherProfile.objects.filter(user=user).first()
    if profile is None:
        return {"email_kinds": all_notification_kinds(), "webhook_kinds": all_notification_kinds()}
    return {
        "email_kinds": list(profile.email_kinds or []) if profile.notify_email else [],
        "webhook_kinds": list(profile.webhook_kinds or []),
        "webhook_url": profile.webhook_url,
        "paused": profile.notifications_opt_out,
    }


def save_preferences(user, *, email_kinds, webhook_kinds, webhook_url: str, paused: bool) -> None:
    """Store what the person chose; the URL was checked by the form (and is again on send)."""
    kinds = all_notification_kinds()
    email = [kind for kind in kinds if kind in email_kinds]
    ResearcherProfile.objects.update_or_create(
        user=user,
        defaults={
            "email_kinds": email,
            "notify_email": bool(email),
            "webhook_kinds": [kind for kind in kinds if kind in webhook_kinds],
            "webhook_url": webhook_url,
            "notifications_opt_out": paused,
        },
    )


def send_test(user) -> NotificationDelivery:
    """Post a test message to the person's saved webhook; TestNotSent says why not."""
    profile = ResearcherProfile.objects.filter(user=user).first()
    if profile is None or not profile.webhook_url:
        raise TestNotSent("Save a webhook address first, then send a test to it.")
    # Two tests at the same instant may both pass this count: it only slows a loop down.
    recent = NotificationDelivery.objects.filter(
        user=user, kind=NotificationKind.TEST, at__gte=timezone.now() - timedelta(minutes=1)
    )
    if recent.count() >= TEST_SENDS_PER_MINUTE:
        raise TestNotSent(f"At most {TEST_SENDS_PER_MINUTE} tests a minute: try again shortly.")
    text = (
        "Medbay test message: the notifications you chose will arrive here.\n"
        f"Change them at {_portal_url()}{PAGE_URL}"
    )
    return send_webhook(user, NotificationKind.TEST, profile.webhook_url, text)


def recent_deliveries(user, limit: int = 20) -> list[NotificationDelivery]:
    return list(NotificationDelivery.objects.filter(user=user).select_related("job")[:limit])
