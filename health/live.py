"""What health changes tell open pages: the event feed and the XID pages refetch their rows.

A cluster's events reach the pages that show that cluster or all of them, never a
page that shows another cluster."""

from __future__ import annotations

from core import live

EVENTS_REGION = "events"


def publish_events(event_ids: list[int], cluster_id: int) -> None:
    """New or grown events (or fault groups) of one cluster: every open feed and XID page
    of that cluster or of all clusters fetches its rows again, with its own filters, so
    an event appears in order and only where it matches."""
    if event_ids:
        groups = live.cluster_groups(live.EVENTS_GROUP, [cluster_id])
        live.poke_many((group, [EVENTS_REGION]) for group in groups)
