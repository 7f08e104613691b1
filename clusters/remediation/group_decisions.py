"""An admin's decisions on a fault group: split it into each node's own incidents, or
decide on a suspected part (replace its nodes, or return them to service)."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from clusters.models import Node
from clusters.remediation import actions, services
from clusters.remediation.policies import on_incidents
from health.live import publish_events
from health.models import FaultGroup, Incident


def split(group: FaultGroup, user) -> list[int]:
    """An admin's "these are not one fault": each incident is decided on its own node
    again, and the group is never formed again. Returns the incidents decided."""
    ids = list(Incident.objects.filter(group=group).values_list("pk", flat=True))
    FaultGroup.objects.filter(pk=group.pk, split_at__isnull=True).update(
        split_at=timezone.now(), split_by=user.get_username()
    )
    Incident.objects.filter(pk__in=ids).update(decision_due=True, decide_after=None)
    on_incidents(ids)
    transaction.on_commit(lambda: publish_events([group.pk]))
    return ids


def decide_part(group: FaultGroup, user, action: str) -> dict[str, str]:
    """An admin's decision on a suspected part: replace its nodes, or return them to
    service. Each node gets its own admin run; {node: what happened} for the page."""
    reason = f"decision on {group.part}: {group.summary}"[:200]
    outcome = {}
    nodes = Node.objects.filter(incidents__group=group).distinct().select_related("pool")
    for node in nodes.order_by("name"):
        try:
            run = actions.request_action(node, action, user=user, reason=reason, confirm=True)
            outcome[node.name] = f"run {run.pk}"
        except services.NodeBusy as busy:
            outcome[node.name] = str(busy)
        except actions.ActionError as error:
            outcome[node.name] = error.message
    return outcome
