"""What the current policies would have done about past incidents: decisions only,
nothing created, drained or sent."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from health.models import Incident
from remediation.deciding import Decision, current_policies, decide


def replay(start: datetime, end: datetime, cluster_id: int | None = None) -> list[Decision]:
    """What the current policies would have done about the incidents opened in
    [start, end) (on one cluster, or on all with None): one decision per incident, each
    naming its node's cluster, nothing created or sent."""
    if start.tzinfo is None or end.tzinfo is None:
        raise ValueError("replay needs timezone-aware start and end")
    policies = current_policies()
    incidents = Incident.objects.filter(opened_at__gte=start, opened_at__lt=end)
    if cluster_id is not None:
        incidents = incidents.filter(node__cluster_id=cluster_id)
    incidents = incidents.select_related("node__cluster").order_by("opened_at", "pk")
    return [
        replace(decide(incident, policies=policies), cluster=incident.node.cluster.name)
        for incident in incidents
    ]
