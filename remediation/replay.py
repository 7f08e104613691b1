"""What the current policies would have done about past incidents: decisions only,
nothing created, drained or sent."""

from __future__ import annotations

from datetime import datetime

from health.models import Incident
from remediation.deciding import Decision, current_policies, decide


def replay(start: datetime, end: datetime) -> list[Decision]:
    """What the current policies would have done about the incidents opened in
    [start, end): one decision per incident, nothing created or sent."""
    if start.tzinfo is None or end.tzinfo is None:
        raise ValueError("replay needs timezone-aware start and end")
    policies = current_policies()
    incidents = (
        Incident.objects.filter(opened_at__gte=start, opened_at__lt=end)
        .select_related("node")
        .order_by("opened_at", "pk")
    )
    return [decide(incident, policies=policies) for incident in incidents]
