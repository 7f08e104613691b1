"""Pages: the live XID/health event feed and the XID catalogue."""

from __future__ import annotations

from django.http import Http404
from django.shortcuts import render
from django.template.loader import render_to_string

from health import xid as catalogue
from health.models import HealthEvent, Severity
from health.queries import filter_events
from portal import live
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
    return render(request, "health/xid_detail.html", {"info": info, "code": code, "recent": recent})


def publish_events(event_ids: list[int]) -> None:
    """New or grown events go to the top of every open feed."""
    if not event_ids:
        return
    events = list(
        HealthEvent.objects.filter(pk__in=event_ids)
        .select_related("node")
        .order_by("-last_observed_at", "-id")[:FEED_LIMIT]
    )
    if not events:
        return
    rows = render_to_string("health/partials/event_rows.html", {"events": events[::-1]})
    # A grown (folded) event moves to the top: delete its old row, then prepend.
    deletes = "".join(f'<tr id="event-{event.pk}" hx-swap-oob="delete"></tr>' for event in events)
    live.send_html(
        live.EVENTS_GROUP,
        f'{deletes}<tbody id="event-rows" hx-swap-oob="afterbegin">{rows}</tbody>',
    )
