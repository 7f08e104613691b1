"""Pages: the live XID/health event feed and the XID catalogue."""

from __future__ import annotations

from django.http import Http404
from django.shortcuts import render

from agent import xid as catalogue
from core.roles import ANY_ROLE, role_required
from health.live import EVENTS_REGION
from health.models import HealthEvent, Severity
from health.queries import filter_events, fold_groups
from identity.cluster_view import viewed_cluster, viewed_name
from portal.regions import pushable, shared_region
from remediation.correlation import grouping_rule
from remediation.deciding import PRODUCT_DEFAULTS, default_for_xid
from remediation.models import Action, Mode, Policy

FEED_LIMIT = 200
MODE_WORDS = {
    Mode.AUTOMATIC: "automatically",
    Mode.APPROVAL: "after an admin's approval",
    Mode.DRY_RUN: "as a dry run",
}


def _on_viewed_cluster(request, events):
    """EVENTS of the cluster the page shows (identity.cluster_view), or of all."""
    shown = viewed_cluster(request)
    return events if shown is None else events.filter(node__cluster=shown)


@pushable("event-rows")
@role_required(*ANY_ROLE)
def event_feed(request):
    def page(template: str):
        events = HealthEvent.objects.select_related("node__cluster", "incident__group")
        events = filter_events(_on_viewed_cluster(request, events), request.GET)
        context = {
            "rows": fold_groups(events[:FEED_LIMIT]),
            "params": request.GET,
            "severities": Severity.values,
            "live": not any(request.GET.get(k) for k in ("until",)),
        }
        return render(request, template, context)

    if request.htmx and request.htmx.target == "event-rows":
        # Every role sees the same events: one rendering serves every open feed that
        # shows the same cluster.
        return shared_region(
            request,
            EVENTS_REGION,
            lambda: page("health/partials/event_rows.html"),
            viewer=f"cluster:{viewed_name(request)}",
        )
    return page("health/event_feed.html")


@role_required(*ANY_ROLE)
def xid_catalogue(request):
    return render(
        request,
        "health/xid_list.html",
        {"entries": sorted(catalogue.CATALOGUE.values(), key=lambda e: e.code)},
    )


def _context_rule(code: int) -> str:
    rule = catalogue.CONTEXT_RULES.get(code, "")
    if rule and code in PRODUCT_DEFAULTS:
        # The catalogue's escalation would contradict the default above (XID 79:
        # "restart the node" beside "Replace"); the engine follows the default.
        return f"NVIDIA's guidance, which Medbay's default does not follow: {rule}"
    return rule


def _policy_words(code: int) -> str:
    """What a policy row makes the engine do instead of the default, if there is one."""
    policy = Policy.objects.filter(xid=code).first()
    if policy is None:
        return ""
    if not policy.enabled:
        return "Nothing: the policy for this XID is switched off."
    return f"{Action(policy.action).label}, {MODE_WORDS.get(policy.mode, policy.mode)}."


@pushable("xid-events")
@role_required(*ANY_ROLE)
def xid_detail(request, code: int):
    if code > 100_000:
        raise Http404("No such XID")
    info = catalogue.lookup(code)
    recent = _on_viewed_cluster(request, HealthEvent.objects.filter(xid=code))
    recent = recent.select_related("node__cluster")[:50]
    action, mode = default_for_xid(code)
    context = {
        "info": info,
        "code": code,
        "recent": recent,
        "default_action": Action(action).label if action else "nothing",
        "default_mode": MODE_WORDS.get(mode, mode),
        "context_rule": _context_rule(code),
        "policy": _policy_words(code),
        "grouping": grouping_rule(info.cause),
    }
    if request.htmx and request.htmx.target == "xid-events":
        return shared_region(
            request,
            EVENTS_REGION,
            lambda: render(request, "health/partials/xid_event_rows.html", context),
            viewer=f"cluster:{viewed_name(request)}",
        )
    return render(request, "health/xid_detail.html", context)
