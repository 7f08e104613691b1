"""Pages: a fault group (a job's own fault, a shared part's), and an admin's decisions
on it: split it into each node's own incidents, or decide on the part."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from core.roles import ANY_ROLE, Role, is_admin, role_required
from health.models import FaultGroup, FaultGroupKind, HealthEvent
from remediation import group_decisions
from remediation.models import Action, Remediation

PART_DECISIONS = {"replace": Action.REPLACE, "release": Action.UNCORDON}


@role_required(*ANY_ROLE)
def fault_group(request, pk: int):
    group = get_object_or_404(FaultGroup.objects.select_related("cluster"), pk=pk)
    incidents = list(group.incidents.select_related("node").order_by("node__name", "gpu_index"))
    context = {
        "group": group,
        "incidents": incidents,
        "nodes": sorted({incident.node.name for incident in incidents}),
        "events": HealthEvent.objects.filter(incident__group=group)
        .select_related("node")
        .order_by("node__name", "gpu_index", "observed_at")[:500],
        "runs": Remediation.objects.filter(incident__group=group)
        .select_related("node", "requested_by")
        .order_by("node__name", "-pk"),
        "is_admin": is_admin(request.user),
        "is_part": group.kind == FaultGroupKind.PART,
    }
    return render(request, "remediation/fault_group.html", context)


@require_POST
@role_required(Role.ADMIN)
def split_group(request, pk: int):
    group = get_object_or_404(FaultGroup, pk=pk)
    if group.split_at is not None:
        messages.info(request, f"Fault group {pk} was already split by {group.split_by}.")
    else:
        decided = group_decisions.split(group, request.user)
        messages.success(request, f"Split: {len(decided)} incidents decided node by node.")
    return redirect("fault-group", pk=pk)


@require_POST
@role_required(Role.ADMIN)
def decide_part(request, pk: int, decision: str):
    if decision not in PART_DECISIONS:
        raise Http404("No such decision")
    group = get_object_or_404(FaultGroup, pk=pk, kind=FaultGroupKind.PART)
    outcome = group_decisions.decide_part(group, request.user, PART_DECISIONS[decision])
    words = "; ".join(f"{node}: {what}" for node, what in outcome.items())
    messages.success(request, f"{group.part}: {words or 'no nodes'}")
    return redirect("fault-group", pk=pk)


@require_POST
@role_required(Role.ADMIN)
def group_by_hand(request):
    """From the approval queue (a new group) or a group's page (add to it)."""
    into = None
    if request.POST.get("group"):
        into = FaultGroup.objects.filter(pk=_number(request.POST["group"])).first()
        if into is None:
            raise Http404("No such fault group")
    note = " ".join(request.POST.get("note", "").split())[:150]
    try:
        group = group_decisions.group_by_hand(
            request.POST.get("incidents", ""), request.user, note=note, into=into
        )
    except group_decisions.GroupingError as error:
        messages.error(request, str(error))
        return redirect("fault-group", pk=into.pk) if into else redirect("remediation-approvals")
    messages.success(request, f"Grouped: {group.summary}")
    return redirect("fault-group", pk=group.pk)


def _number(text: str) -> int:
    return int(text) if text.isdigit() and len(text) < 12 else 0
