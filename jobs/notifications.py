"""Tells a job's owner when Medbay's remediation touched their job.

The remediation engine calls `notify_remediation_effect` after it has acted on a
job. Delivery is best effort: a broken mail server or webhook is logged and never
fails the engine's step, which must stay idempotent and quick.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail

from jobs.accounts import profile_for_unix_user

logger = logging.getLogger(__name__)

EFFECTS = ("signalled", "requeued", "restarted", "cancelled")
WEBHOOK_TIMEOUT_S = 3.0

_VERBS = {
    "signalled": "was sent USR1 to checkpoint",
    "requeued": "was requeued",
    "restarted": "restarted",
    "cancelled": "was cancelled",
}


def notify_remediation_effect(job, *, what: str, remediation) -> None:
    """Email the job's owner and post their webhook, unless they opted out."""
    if what not in EFFECTS:
        raise ValueError(f"what must be one of {', '.join(EFFECTS)}, not {what!r}")
    recipient = owner_of(job)
    if recipient is None:
        logger.info(
            "No portal user for job %s (unix user %r); not notified", job.slurm_id, job.user
        )
        return
    user, profile = recipient
    if profile is not None and profile.notifications_opt_out:
        return
    subject, text = message_for(job, what, remediation)
    if user.email and (profile is None or profile.notify_email):
        _send_email(user.email, subject, text)
    if profile is not None and profile.webhook_url:
        post_webhook(profile.webhook_url, f"{subject}\n{text}")


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
    from jobs.models import ResearcherProfile

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
    lines.append(f"Details: {settings.MEDBAY_PORTAL_URL.rstrip('/')}/jobs/{job.slurm_id}/")
    return subject, "\n".join(lines)


def _send_email(address: str, subject: str, text: str) -> None:
    try:
        send_mail(subject, text, None, [address])
    except Exception:  # SMTP failures of any kind must not break a remediation step
        logger.warning("Email to %s not delivered", address, exc_info=True)


def post_webhook(url: str, text: str) -> bool:
    """POST a Slack-compatible `{"text": ...}`; returns whether it was accepted."""
    if not url.startswith(("https://", "http://")):
        logger.warning("Webhook URL %r is not http(s); skipped", url)
        return False
    body = json.dumps({"text": text}).encode()
    request = urllib.request.Request(  # noqa: S310 - scheme checked above
        url, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT_S) as response:  # noqa: S310
            return 200 <= response.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        logger.warning("Webhook %s not delivered", url, exc_info=True)
        return False


def notify_job_fault(job, *, summary: str) -> None:
    """Tell the owner, once, that their job's own fault stopped it (a fault group)."""
    recipient = owner_of(job)
    if recipient is None:
        return
    user, profile = recipient
    if profile is not None and profile.notifications_opt_out:
        return
    subject = f"[Medbay] Job {job.slurm_id} ({job.name or 'unnamed'}) hit a fault of its own"
    text = (
        f"Your job {job.slurm_id}: {summary}. Medbay took no node out of service for it;"
        " its error output says what went wrong.\n"
        f"Details: {settings.MEDBAY_PORTAL_URL.rstrip('/')}/jobs/{job.slurm_id}/"
    )
    if user.email and (profile is None or profile.notify_email):
        _send_email(user.email, subject, text)
    if profile is not None and profile.webhook_url:
        post_webhook(profile.webhook_url, f"{subject}\n{text}")
