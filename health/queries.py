"""Filters shared by the event feed page and the events API."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from core.inputs import bounded_int, in_range
from health.models import EventKind, FaultGroup, HealthEvent, Severity

PERIODS = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7)}


def _int(value: str | None) -> int | None:
    return bounded_int(value)


def filter_events(events, params):
    """Apply node/gpu/xid/severity/kind/time filters; unusable values are ignored."""
    if params.get("node"):
        events = events.filter(node__name=params["node"][:128])
    if (gpu := _int(params.get("gpu"))) is not None:
        events = events.filter(gpu_index=gpu)
    if (code := _int(params.get("xid"))) is not None:
        events = events.filter(xid=code)
    if params.get("severity") in Severity.values:
        events = events.filter(severity=params["severity"])
    if params.get("kind") in EventKind.values:
        events = events.filter(kind=params["kind"])
    if params.get("period") in PERIODS:
        events = events.filter(last_observed_at__gte=timezone.now() - PERIODS[params["period"]])
    for name, lookup in (("since", "last_observed_at__gte"), ("until", "observed_at__lte")):
        moment = _moment(params.get(name))
        if moment is not None:
            events = events.filter(**{lookup: moment})
    return events.order_by("-last_observed_at", "-id")


def _moment(value):
    if not value:
        return None
    try:
        moment = parse_datetime(value)
    except ValueError:
        return None
    if moment is not None and moment.tzinfo is None:
        moment = timezone.make_aware(moment)
    # `9999-12-31T23:59:59-23:59` parses, then overflows when made UTC: ignored too.
    return moment if in_range(moment) else None


def recent_events_for_node(node, limit: int = 50):
    return HealthEvent.objects.filter(node=node).order_by("-last_observed_at", "-id")[:limit]


__all__ = ["filter_events", "recent_events_for_node", "HealthEvent"]


@dataclass
class GroupRow:
    """The feed's one row for a fault group: its newest event, and all of its events."""

    group: FaultGroup
    events: list = field(default_factory=list)

    @property
    def newest(self):
        return self.events[0]

    @property
    def nodes(self) -> list[str]:
        return sorted({event.node.name for event in self.events})


def fold_groups(events) -> list:
    """The feed's rows: an event, or one GroupRow where the newest of a fault group's
    events stood (a job's crash on 64 nodes is one row, its events inside it)."""
    rows, groups = [], {}
    for event in events:
        group = event.incident.group if event.incident_id and event.incident else None
        if group is None or group.split_at is not None:
            rows.append(event)
        elif group.pk in groups:
            groups[group.pk].events.append(event)
        else:
            groups[group.pk] = GroupRow(group, [event])
            rows.append(groups[group.pk])
    return rows
