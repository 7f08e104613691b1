"""Template tags for remediation state shown outside the remediation pages."""

from __future__ import annotations

from django import template

from clusters.remediation.models import BreakerTrip
from clusters.remediation.safety import breaker_state

register = template.Library()


@register.simple_tag
def open_breaker():
    """The oldest open circuit-breaker trip, or None while automation may act.

    Every page renders this banner, and the breaker is almost always closed: one
    indexed query answers that case. Only an open trip pays for `breaker_state`,
    which first closes trips whose limit is no longer reached.
    """
    if not BreakerTrip.objects.filter(closed_at__isnull=True).exists():
        return None
    state = breaker_state()
    return state.trips[0] if state.open else None
