"""Template tags for remediation state shown outside the remediation pages."""

from __future__ import annotations

from django import template

from clusters.remediation.safety import breaker_state

register = template.Library()


@register.simple_tag
def open_breaker():
    """The oldest open circuit-breaker trip, or None while automation may act."""
    state = breaker_state()
    return state.trips[0] if state.open else None
