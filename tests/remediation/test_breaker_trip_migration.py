"""Trips written before they named their cluster are given the cluster they paused."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = ("clusters", "0016_alter_remediation_trigger")
AFTER = ("clusters", "0019_breakertrip_cluster_required")


def migrate(target):
    """Migrate to TARGET (app, name); the models as they were there."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([target])
    return executor.loader.project_state(target).apps


@pytest.mark.django_db(transaction=True)
def test_old_trips_take_the_cluster_of_their_first_refusal_or_of_their_partition():
    old = migrate(BEFORE)
    Cluster = old.get_model("clusters", "Cluster")
    Partition = old.get_model("clusters", "Partition")
    Node = old.get_model("clusters", "Node")
    BreakerTrip = old.get_model("clusters", "BreakerTrip")
    BreakerRefusal = old.get_model("clusters", "BreakerRefusal")
    first, second = Cluster.objects.create(name="first"), Cluster.objects.create(name="second")
    for cluster in (first, second):
        Partition.objects.create(cluster=cluster, name="train")
    Partition.objects.create(cluster=second, name="infer")
    node = Node.objects.create(cluster=second, name="gpu-01")
    refused = BreakerTrip.objects.create(partition="train", reason="storm on second")
    BreakerRefusal.objects.create(trip=refused, node=node, action="replace", reason="limit")
    infer = BreakerTrip.objects.create(partition="infer", reason="only second has infer")
    unplaceable = BreakerTrip.objects.create(partition="train", reason="which train?")

    new = migrate(AFTER)
    placed = new.get_model("clusters", "BreakerTrip").objects
    assert placed.get(pk=refused.pk).cluster_id == second.pk
    assert placed.get(pk=infer.pk).cluster_id == second.pk
    assert not placed.filter(pk=unplaceable.pk).exists()

    executor = MigrationExecutor(connection)  # every app's latest, for the tests after
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
