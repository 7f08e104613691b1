"""The breaker is per cluster: two clusters both have a partition "train", and a storm
on one neither trips, holds nor shares a trip with the other."""

from __future__ import annotations

import itertools

import pytest
from django.utils import timezone

from clusters.models import Node
from health.ingest import ingest, validate_batch
from remediation import safety
from remediation.models import BreakerRefusal, BreakerTrip, Remediation
from remediation.transitions import RunStatus

from . import test_per_cluster

# The two clusters, each with a partition "train" of four nodes gpu-01..04.
sim, second = test_per_cluster.sim, test_per_cluster.second

_event_ids = itertools.count(1)


@pytest.fixture(autouse=True)
def one_train_node_at_a_time(settings):
    # Four train nodes per cluster: the partition's limit is one node in remediation.
    settings.MEDBAY_BREAKER_PARTITION_PCT = 10
    settings.MEDBAY_BREAKER_PARTITION_MIN_NODES = 1
    settings.MEDBAY_BREAKER_MAX_NODES = 100


def train_nodes(cluster_name: str) -> list[Node]:
    nodes = Node.objects.filter(cluster__name=cluster_name, partitions__name="train")
    return list(nodes.order_by("name"))


def storm(nodes, capture) -> None:
    """An XID 79 on each node, reported as its agent would, each decided on commit."""
    for node in nodes:
        event = {
            "id": f"storm-{next(_event_ids)}", "kind": "xid", "xid": 79, "gpu_index": 3,
            "message": "GPU has fallen off the bus.", "observed_at": timezone.now().isoformat(),
        }  # fmt: skip
        with capture(execute=True):
            ingest(node, validate_batch({"node": node.name, "events": [event]}).events)


def runs_on(cluster_name: str):
    return Remediation.objects.filter(node__cluster__name=cluster_name)


def test_a_storm_on_one_clusters_train_trips_the_breaker_of_that_cluster_only(
    sim, second, django_capture_on_commit_callbacks
):
    storm(train_nodes("test"), django_capture_on_commit_callbacks)

    trip = BreakerTrip.objects.get()
    assert (trip.cluster.name, trip.partition, trip.suppressed) == ("test", "train", 3)
    assert runs_on("test").count() == 1
    refusals = BreakerRefusal.objects.select_related("trip__cluster", "node__cluster")
    assert len(refusals) == 3
    assert all(r.trip.cluster.name == r.node.cluster.name == "test" for r in refusals)
    assert [trip.pk for trip in safety.breaker_state(second.pk).trips] == []

    # The other cluster's train still heals on its own.
    storm(train_nodes("second")[:1], django_capture_on_commit_callbacks)
    assert runs_on("second").count() == 1
    assert BreakerTrip.objects.count() == 1
    assert not BreakerRefusal.objects.filter(node__cluster=second).exists()


def test_a_storm_on_each_cluster_opens_a_trip_of_each_and_reuses_none_across_them(
    sim, second, django_capture_on_commit_callbacks
):
    storm(train_nodes("test"), django_capture_on_commit_callbacks)
    storm(train_nodes("second"), django_capture_on_commit_callbacks)

    trips = {trip.cluster.name: trip for trip in BreakerTrip.objects.select_related("cluster")}
    assert sorted(trips) == ["second", "test"]
    assert {name: trip.partition for name, trip in trips.items()} == {
        "second": "train",
        "test": "train",
    }
    assert (trips["test"].suppressed, trips["second"].suppressed) == (3, 3)
    for name, trip in trips.items():
        refused = BreakerRefusal.objects.filter(trip=trip)
        assert set(refused.values_list("node__cluster__name", flat=True)) == {name}


def test_a_trip_closes_when_its_own_cluster_recovers_whatever_the_other_cluster_does(
    sim, second, django_capture_on_commit_callbacks
):
    storm(train_nodes("test"), django_capture_on_commit_callbacks)
    storm(train_nodes("second"), django_capture_on_commit_callbacks)
    runs_on("test").update(status=RunStatus.SUCCEEDED, finished_at=timezone.now())

    safety.close_recovered_trips()

    still_open = BreakerTrip.objects.filter(closed_at__isnull=True)
    assert list(still_open.values_list("cluster__name", flat=True)) == ["second"]
    assert not safety.breaker_state(Node.objects.filter(cluster__name="test")[0].cluster_id).open
    assert safety.breaker_state(second.pk).open
