"""Chaos: a storm of 10,000 XID events across every node of a 24-node cluster.

A bad driver push makes every GPU report XID 79 at once. The events go through
the agent's ingestion service in batches, some of them twice (agents retrying
after a timeout); the circuit breaker must keep automation from draining more
nodes than MEDBAY_BREAKER_* allow, folding must keep the table small without
losing a count, and closing the breaker must not replay what it suppressed.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import Sum
from django.utils import timezone

from clusters.models import Node, Partition
from health.ingest import FOLD_WINDOW, INCIDENT_SILENCE, ingest, validate_batch
from health.models import HealthEvent, Incident
from remediation import safety
from remediation.engine import Engine
from remediation.models import BreakerTrip, Remediation
from remediation.services import transition
from remediation.transitions import ACTIVE, RunStatus

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

STORM_EVENTS = 10_000
BATCH = 250
GPUS = 8


def storm_batches(names: list[str]) -> dict[str, list[list[dict]]]:
    """10,000 XID 79 events, round-robin over nodes and GPUs, 1 ms apart, in batches."""
    start = timezone.now() - timedelta(seconds=30)
    per_node: dict[str, list[dict]] = {name: [] for name in names}
    for number in range(STORM_EVENTS):
        name = names[number % len(names)]
        gpu = (number // len(names)) % GPUS
        per_node[name].append(
            {
                "id": f"storm-{number}",
                "kind": "xid",
                "xid": 79,
                "gpu_index": gpu,
                "message": "GPU has fallen off the bus.",
                "observed_at": (start + timedelta(milliseconds=number)).isoformat(),
            }
        )
    return {
        name: [events[i : i + BATCH] for i in range(0, len(events), BATCH)]
        for name, events in per_node.items()
    }


def send(name: str, events: list[dict], *, now=None):
    batch = validate_batch({"node": name, "events": events}, now=now)
    return ingest(Node.objects.get(name=name), batch.events, now=now)


def drained(sim) -> set[str]:
    return {info.name for info in sim.nodes() if info.flags & {"drain", "fail"}}


def test_a_storm_of_ten_thousand_xids_drains_no_more_nodes_than_the_breaker_allows(
    storm_sim, django_capture_on_commit_callbacks
):
    names = sorted(info.name for info in storm_sim.nodes())
    assert len(names) == 24
    batches = storm_batches(names)
    accepted = duplicates = 0
    with django_capture_on_commit_callbacks(execute=True):
        for name, node_batches in batches.items():
            for events in node_batches:
                accepted += send(name, events).accepted
            # The agent timed out on its last batch and sends it again.
            duplicates += send(name, node_batches[-1]).duplicates
    assert accepted == STORM_EVENTS
    assert duplicates == sum(len(node_batches[-1]) for node_batches in batches.values())

    assert HealthEvent.objects.aggregate(total=Sum("count"))["total"] == STORM_EVENTS
    assert HealthEvent.objects.count() == len(names) * GPUS
    assert Incident.objects.aggregate(total=Sum("event_count"))["total"] == STORM_EVENTS

    runs = Remediation.objects.all()
    assert 0 < runs.count() <= safety.max_nodes()
    for partition in Partition.objects.all():
        in_partition = runs.filter(node__partitions=partition).values("node").distinct()
        assert in_partition.count() <= safety.partition_cap(partition.nodes.count())
    trips = BreakerTrip.objects.filter(closed_at__isnull=True)
    assert trips.exists()
    assert sum(trips.values_list("suppressed", flat=True)) >= len(names) - runs.count()

    engine = Engine("storm", backend=storm_sim, fleet=storm_sim)
    for _ in range(5):
        engine.run_once()
        Remediation.objects.filter(status=RunStatus.WAITING).update(due_at=timezone.now())
    assert 0 < len(drained(storm_sim)) <= safety.max_nodes()
    assert drained(storm_sim) <= set(runs.values_list("node__name", flat=True))


def test_closing_the_breaker_after_a_storm_replays_none_of_the_suppressed_events(
    storm_sim, settings, django_capture_on_commit_callbacks
):
    names = sorted(info.name for info in storm_sim.nodes())
    with django_capture_on_commit_callbacks(execute=True):
        for name, node_batches in storm_batches(names).items():
            for events in node_batches:
                send(name, events)
    admitted = set(Remediation.objects.values_list("pk", flat=True))
    for run in Remediation.objects.filter(status__in=[str(s) for s in ACTIVE]):
        assert transition(run, RunStatus.CANCELLED, message="storm over")
    settings.MEDBAY_BREAKER_WINDOW_S = 0

    assert not safety.breaker_state().open
    assert not BreakerTrip.objects.filter(closed_at__isnull=True).exists()
    engine = Engine("after-storm", backend=storm_sim, fleet=storm_sim)
    engine.run_once()
    assert set(Remediation.objects.values_list("pk", flat=True)) == admitted
    assert not drained(storm_sim) - set(Remediation.objects.values_list("node__name", flat=True))

    # A fault reported again once the storm has gone quiet (past the fold window and the
    # incident silence, so it opens a new incident) is acted on like any fresh fault.
    later = timezone.now() + max(FOLD_WINDOW, INCIDENT_SILENCE) + timedelta(seconds=30)
    handled = set(Remediation.objects.values_list("node__name", flat=True))
    fresh = next(name for name in names if name not in handled)
    event = {
        "id": "after-storm-1",
        "kind": "xid",
        "xid": 79,
        "gpu_index": 0,
        "message": "GPU has fallen off the bus.",
        "observed_at": later.isoformat(),
    }
    with django_capture_on_commit_callbacks(execute=True):
        send(fresh, [event], now=later)
    assert Remediation.objects.count() == len(admitted) + 1
    assert Remediation.objects.latest("id").node.name == fresh
