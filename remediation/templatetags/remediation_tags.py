"""Template tags for remediation state shown outside the remediation pages."""

from __future__ import annotations

from django import template

from remediation.models import Action, BreakerTrip
from remediation.safety import breaker_state, latest_refusal, refused_nodes
from remediation.transitions import RunStatus

register = template.Library()


@register.simple_tag
def breaker_refusal(node):
    """The node's latest refusal by a breaker trip still open (its page), or None."""
    return latest_refusal(node)


@register.simple_tag
def breaker_refused_nodes(limit: int = 10, cluster=None):
    """(each refused node's latest refusal, newest first, at most LIMIT; how many nodes)
    for the breaker banner, under an open trip (`open_breaker_trips` closed the others); of
    CLUSTER's nodes where the banner speaks for one cluster."""
    return refused_nodes(limit, cluster.pk if cluster else None)


@register.simple_tag
def open_breaker_trips(cluster=None):
    """The open trips, oldest first, each with its cluster; of CLUSTER only where the
    banner speaks for one cluster.

    Every board renders this banner, and the breaker is almost always closed: one
    indexed query answers that case. Only an open trip pays for `breaker_state`,
    which first closes trips whose limit is no longer reached.
    """
    cluster_id = cluster.pk if cluster is not None else None
    open_trips = BreakerTrip.objects.filter(closed_at__isnull=True)
    if cluster_id is not None:
        open_trips = open_trips.filter(cluster_id=cluster_id)
    if not open_trips.exists():
        return []
    return breaker_state(cluster_id).trips


# What each step of a plan (remediation/plans.py) is called on a page.
STEP_LABELS = {
    "signal_jobs": "Signal jobs (USR1)",
    "wait_grace": "Wait for checkpoints",
    "requeue_jobs": "Requeue jobs",
    "release_jobs": "Release jobs",
    "drain": "Drain",
    "cordon": "Cordon",
    "uncordon": "Uncordon",
    "resume": "Resume",
    "reboot": "Reboot",
    "reset_gpu": "Reset GPU",
    "move_pool": "Move to another pool",
    "wait_drained": "Wait until drained",
    "notify": "Notify admins",
    "quarantine": "Quarantine",
    "check_eligibility": "Check for a free spare",
    "replace": "Replace with a spare",
    "validate": "Validate the replacement",
}


@register.filter
def step_label(name) -> str:
    if not name:
        return "—"
    return STEP_LABELS.get(name) or str(name).replace("_", " ").capitalize()


@register.filter
def run_status_label(value) -> str:
    """A run's status as the badges word it ("Awaiting Approval"), for history rows."""
    if not value:
        return "—"
    try:
        return RunStatus(value).label
    except ValueError:
        return str(value).replace("_", " ")


@register.filter
def action_label(value) -> str:
    """An action code ("reset_gpu") as its choice label ("Reset GPU")."""
    try:
        return Action(value).label
    except ValueError:
        return str(value or "—").replace("_", " ")
