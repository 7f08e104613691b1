"""What health changes tell open pages: the event feed and the XID pages refetch their rows."""

from __future__ import annotations

from core import live

EVENTS_REGION = "events"


def publish_events(event_ids: list[int]) -> None:
    """New or grown events: every open feed and XID page fetches its rows again, with
    its own filters, so an event appears in order and only where it matches."""
    if event_ids:
        live.poke(live.EVENTS_GROUP, [EVENTS_REGION])
