"""The demand history: hourly rollups that outlive the raw samples, and the managers' days."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command

from demand import history
from demand.models import DemandHour, DemandSample, Metric

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)


def record(cluster, metric, values, *, scope="", start=T0, every=timedelta(minutes=20)):
    for index, value in enumerate(values):
        DemandSample.objects.create(
            cluster=cluster,
            metric=metric,
            scope=scope,
            value=value,
            missing="" if value is not None else "Prometheus down",
            sampled_at=start + index * every,
        )


def test_whole_hours_roll_up_into_means_extremes_and_missing_counts(cluster):
    record(cluster, Metric.INFERENCE_LOAD, [100, 200, None, 400])  # 10:00 to 11:00 (the next hour)

    assert history.roll_up(cluster, T0 + timedelta(hours=1, minutes=30)) == 1  # 11:xx is not whole

    first = DemandHour.objects.get(hour=T0)
    assert (first.mean, first.low, first.high) == (150, 100, 200)
    assert (first.samples, first.missing) == (3, 1)
    # Running it again rewrites, never doubles.
    history.roll_up(cluster, T0 + timedelta(hours=1, minutes=30))
    assert DemandHour.objects.filter(hour=T0).count() == 1


def test_raw_samples_go_only_once_their_hours_are_rolled_up(cluster):
    record(cluster, Metric.INFERENCE_LOAD, [100, 200, 300, 400, 500, 600])

    assert history.prune(cluster, T0 + timedelta(days=1)) == 0  # nothing rolled up yet
    history.roll_up(cluster, T0 + timedelta(hours=1))
    history.prune(cluster, T0 + timedelta(days=1))

    assert sorted(DemandSample.objects.values_list("value", flat=True)) == [400, 500, 600]


def test_rollup_history_rolls_the_demand_up_and_prunes_old_raw_samples(settings, cluster):
    settings.MEDBAY_DEMAND_RAW_DAYS = 1
    record(cluster, Metric.INFERENCE_LOAD, [100, 200], start=T0 - timedelta(days=400))

    call_command("rollup_history", stdout=open("/dev/null", "w"))  # noqa: SIM115

    assert not DemandSample.objects.exists()
    assert DemandHour.objects.get().mean == 150


def test_gpu_hours_by_pool_per_day_and_the_pooled_utilization_against_a_static_split(cluster):
    # Training starts with 2 nodes, then borrows a third from inference and uses all three.
    every = timedelta(hours=1)
    record(cluster, Metric.POOL_NODES, [2, 3], scope="training", every=every)
    record(cluster, Metric.POOL_BUSY_NODES, [2, 3], scope="training", every=every)
    record(cluster, Metric.POOL_NODES, [2, 1], scope="inference", every=every)
    record(cluster, Metric.POOL_BUSY_NODES, [0, 0], scope="inference", every=every)

    (day,) = history.pool_days(cluster, T0, T0 + timedelta(hours=2))

    assert day.held_gpu_h == {"training": 40.0, "inference": 24.0}
    assert day.used_gpu_h == {"training": 40.0, "inference": 0.0}
    assert day.pooled_pct == 62.5  # 40 of 64 GPU-hours
    assert day.static_pct == 50.0  # the static training pool of 2 could use 32
