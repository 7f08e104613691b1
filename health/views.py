"""Pages: the live XID/health event feed and the XID catalogue."""

from __future__ import annotations

from django.http import Http404
from django.shortcuts import render

from health import xid as catalogue
from health.models import HealthEvent, Severity
from health.queries import filter_events
from portal.roles import ANY_ROLE, role_required

FEED_LIMIT = 200


@role_required(*ANY_ROLE)
def event_feed(request):
    events = filter_events(HealthEvent.objects.select_related("node"), request.GET)[:FEED_LIMIT]
    context = {
        "events": events,
        "params": request.GET,
        "severities": Severity.values,
        "live": not any(request.GET.get(k) for k in ("until",)),
    }
    if request.htmx and request.htmx.target == "event-rows":
        return render(request, "health/partials/event_rows.html", context)
    return render(request, "health/event_feed.html", context)


@role_required(*ANY_ROLE)
def xid_catalogue(request):
    return render(
        request,
        "health/xid_list.html",
        {"entries": sorted(catalogue.CATALOGUE.values(), key=lambda e: e.code)},
    )


@role_required(*ANY_ROLE)
def xid_detail(request, code: int):
    if code > 100_000:
        raise Http404("No such XID")
    info = catalogue.lookup(code)
    recent = HealthEvent.objects.filter(xid=code).select_related("node")[:50]
    context = {"info": info, "code": code, "recent": recent}
    if request.htmx and request.htmx.target == "xid-events":
        return render(request, "health/partials/xid_event_rows.html", context)
    return render(request, "health/xid_detail.html", context)
