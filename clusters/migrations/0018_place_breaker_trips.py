"""Each breaker trip belongs to one cluster (issue #32: the breaker is per cluster).

Existing trips are given the cluster of the node whose refusal opened them (every trip
is written with that first refusal); a trip without refusals takes the one cluster
that has its partition, or the only cluster. A trip none of these place names no
cluster at all (no cluster has its partition, or several do and it refused nothing),
so it cannot say which cluster it paused, and is deleted.
"""

from django.db import migrations


def place_trips(apps, schema_editor):
    BreakerTrip = apps.get_model("clusters", "BreakerTrip")
    BreakerRefusal = apps.get_model("clusters", "BreakerRefusal")
    Partition = apps.get_model("clusters", "Partition")
    Cluster = apps.get_model("clusters", "Cluster")
    clusters = list(Cluster.objects.values_list("pk", flat=True))
    for trip in BreakerTrip.objects.filter(cluster__isnull=True).iterator():
        first = (
            BreakerRefusal.objects.filter(trip_id=trip.pk)
            .order_by("at", "pk")
            .values_list("node__cluster_id", flat=True)
            .first()
        )
        if first is None and trip.partition:
            having = list(
                Partition.objects.filter(name=trip.partition).values_list("cluster_id", flat=True)
            )
            first = having[0] if len(having) == 1 else None
        if first is None and len(clusters) == 1:
            first = clusters[0]
        if first is None:
            trip.delete()
        else:
            BreakerTrip.objects.filter(pk=trip.pk).update(cluster_id=first)


class Migration(migrations.Migration):
    # Apart from 0017 on purpose: on PostgreSQL the new column's index is created at the
    # end of its migration, and it cannot be while this backfill's deletions still have
    # foreign-key checks pending in the same transaction.
    dependencies = [
        ("clusters", "0017_breakertrip_cluster"),
    ]

    operations = [
        migrations.RunPython(place_trips, migrations.RunPython.noop),
    ]
