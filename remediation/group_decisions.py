"""An admin's decisions on a fault group: split it into each node's own incidents,
decide on a suspected part (replace its nodes, or return them to service), or group
incidents by hand."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from clusters.models import Node
from health.live import publish_events
from health.models import FaultGroup, FaultGroupKind, Incident
from remediation import actions, services
from remediation.admission import on_incidents


def split(group: FaultGroup, user) -> list[int]:
    """An admin's "these are not one fault": each incident is decided on its own node
    again, and the group is never formed again. Returns the incidents decided."""
    ids = list(Incident.objects.filter(group=group).values_list("pk", flat=True))
    FaultGroup.objects.filter(pk=group.pk, split_at__isnull=True).update(
        split_at=timezone.now(), split_by=user.get_username()
    )
    Incident.objects.filter(pk__in=ids).update(decision_due=True, decide_after=None)
    on_incidents(ids)
    transaction.on_commit(lambda: publish_events([group.pk], group.cluster_id))
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


class GroupingError(ValueError):
    """Incident ids an admin cannot group: unknown, of several clusters, or too few."""


MAX_GROUPED_BY_HAND = 500


def group_by_hand(text: str, user, *, note: str = "", into: FaultGroup | None = None):
    """An admin's "these are one fault": the incidents named (ids, comma- or space-
    separated) join `into` or a new manual group. Runs already made go on; incidents
    still waiting are no longer decided node by node. Returns the group."""
    ids = _incident_ids(text)
    incidents = list(Incident.objects.filter(pk__in=ids).select_related("node"))
    missing = sorted(set(ids) - {incident.pk for incident in incidents})
    if missing:
        raise GroupingError(f"No incident {', '.join(map(str, missing))}.")
    clusters = {incident.node.cluster_id for incident in incidents}
    if into is not None:
        clusters.add(into.cluster_id)
    if len(clusters) > 1:
        raise GroupingError("Those incidents are on nodes of different clusters.")
    if into is None and len(incidents) < 2:
        raise GroupingError("Name two or more incidents to group.")
    group = into or FaultGroup.objects.create(
        kind=FaultGroupKind.MANUAL,
        cluster_id=clusters.pop(),
        rule=f"grouped by hand by {user.get_username()}" + (f": {note}" if note else ""),
        window_s=0,
        opened_at=min(incident.opened_at for incident in incidents),
    )
    Incident.objects.filter(pk__in=ids).update(group=group, decision_due=False, decide_after=None)
    if group.kind == FaultGroupKind.MANUAL:  # a job's or a part's keeps its own summary
        members = list(Incident.objects.filter(group=group).values_list("node_id", flat=True))
        group.summary = f"{len(members)} incidents on {len(set(members))} nodes, {group.rule}"
        FaultGroup.objects.filter(pk=group.pk).update(summary=group.summary[:500])
    transaction.on_commit(lambda: publish_events([group.pk], group.cluster_id))
    return group


def _incident_ids(text: str) -> list[int]:
    words = (text or "").replace(",", " ").split()
    if not words:
        raise GroupingError("Name the incidents to group, by number.")
    if len(words) > MAX_GROUPED_BY_HAND:
        raise GroupingError(f"At most {MAX_GROUPED_BY_HAND} incidents at once.")
    if not all(word.isdigit() and len(word) < 12 for word in words):
        raise GroupingError("Incidents are named by number, e.g. 12, 13, 15.")
    return sorted({int(word) for word in words})
