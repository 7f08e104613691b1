"""History tables partitioned by month on PostgreSQL, and retention dropping whole months."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from django.db import connection

from tests.reports.conftest import at

pytestmark = [pytest.mark.postgres, pytest.mark.django_db, pytest.mark.usefixtures("postgres_only")]

JANUARY, FEBRUARY, MARCH = 0, 31 * 24, 59 * 24  # hours after 2026-01-01
APRIL = 90 * 24


def partition_of(model, pk) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT tableoid::regclass::text FROM {model._meta.db_table} WHERE id = %s", [pk]
        )
        return cursor.fetchone()[0]


def test_each_history_table_is_partitioned_by_month_with_the_next_months_ready():
    from reports.partitions import HISTORY_TABLES, is_partitioned, months

    today = datetime.now(UTC)
    for history in HISTORY_TABLES:
        assert is_partitioned(history), history.table
        starts = [month.start for month in months(history)]
        assert datetime(today.year, today.month, 1, tzinfo=UTC) in starts
        assert len([start for start in starts if start > today]) >= 3


def test_rows_land_in_their_month_and_ids_stay_unique_and_increasing(history):
    from clusters.models import NodeStateChange

    node = history.node("n1", [])
    now = datetime.now(UTC)
    first = NodeStateChange.objects.create(node=node, to_status="idle", at=now)
    second = NodeStateChange.objects.create(node=node, to_status="allocated", at=at(1))
    assert second.pk > first.pk
    assert partition_of(NodeStateChange, first.pk) == (
        f"clusters_nodestatechange_{now.year:04d}_{now.month:02d}"
    )
    # No partition for January 2026 yet: the row waits in DEFAULT, and reads find it.
    assert partition_of(NodeStateChange, second.pk) == "clusters_nodestatechange_default"
    assert NodeStateChange.objects.get(pk=second.pk).to_status == "allocated"


def test_history_written_into_the_past_gets_its_months(history):
    from clusters.models import NodeStateChange
    from reports.partitions import ensure_all

    node = history.node("n1", [(JANUARY + 1, "idle"), (FEBRUARY + 1, "down")])
    created = ensure_all()
    assert "clusters_nodestatechange_2026_01" in created
    assert "clusters_nodestatechange_2026_02" in created
    by_month = {
        change.to_status: partition_of(NodeStateChange, change.pk)
        for change in NodeStateChange.objects.filter(node=node)
    }
    assert by_month == {
        "idle": "clusters_nodestatechange_2026_01",
        "down": "clusters_nodestatechange_2026_02",
    }
    assert ensure_all() == []  # nothing left in DEFAULT, every month already there


def test_the_migration_can_be_undone_and_done_again_keeping_every_row(history):
    from clusters.models import NodeStateChange
    from reports.partitions import (
        HISTORY_TABLES,
        is_partitioned,
        partition_table,
        unpartition_table,
    )

    node = history.node("n1", [(JANUARY + 1, "idle"), (FEBRUARY + 1, "down")])
    rows = sorted(NodeStateChange.objects.filter(node=node).values_list("id", "to_status"))
    states = HISTORY_TABLES[0]
    unpartition_table(states)
    assert not is_partitioned(states)
    assert sorted(NodeStateChange.objects.values_list("id", "to_status")) == rows
    partition_table(states)
    assert is_partitioned(states)
    assert sorted(NodeStateChange.objects.values_list("id", "to_status")) == rows
    later = NodeStateChange.objects.create(node=node, to_status="idle", at=at(MARCH))
    assert later.pk > max(pk for pk, _ in rows)


@pytest.fixture
def quarter(history):
    """January to March 2026, partitioned and rolled up:
    n1 changes in each month, n2 in January and March (each node's last change before
    April is in March); job 1 ran from January into February and ended; job 2 started
    in January and still runs; one event in January without an incident, one in March
    whose incident saw its last event then."""
    from health.models import HealthEvent, Incident
    from reports.partitions import ensure_all
    from reports.rollups import roll_up

    n1 = history.node("n1", [(1, "idle"), (FEBRUARY + 8, "allocated"), (MARCH + 12, "idle")])
    n2 = history.node("n2", [(2, "idle"), (MARCH + 2, "allocated")])
    history.job(1, 8, [(10, "RUNNING"), (FEBRUARY + 20, "COMPLETED")],
                start_at=at(10), end_at=at(FEBRUARY + 20))  # fmt: skip
    history.job(2, 8, [(20, "RUNNING")], start_at=at(20))
    HealthEvent.objects.create(
        node=n1, kind="check", check_name="dcgm_diag", status="fail", severity="critical",
        observed_at=at(5), last_observed_at=at(5), fold_key="c",
    )  # fmt: skip
    incident = Incident.objects.create(
        node=n2, gpu_index=0, opened_at=at(MARCH + 20), last_event_at=at(MARCH + 20),
        severity="critical", xids=[79],
    )  # fmt: skip
    HealthEvent.objects.create(
        node=n2, incident=incident, kind="xid", xid=79, gpu_index=0, severity="critical",
        observed_at=at(MARCH + 20), last_observed_at=at(MARCH + 20), fold_key="x",
    )  # fmt: skip
    ensure_all()
    roll_up(n1.cluster, until=date(2026, 4, 1))
    return n1.cluster


def test_retention_drops_whole_months_and_deletes_the_rest_row_by_row(quarter):
    from clusters.models import NodeStateChange
    from health.models import HealthEvent
    from jobs.models import JobStateChange
    from reports.partitions import HISTORY_TABLES, months
    from reports.retention import prune

    expected = {"node_state_changes": 3, "job_state_changes": 2, "health_events": 2}
    dry = prune(at(APRIL), dry_run=True)
    assert dry.rows == expected
    assert NodeStateChange.objects.count() == 5

    result = prune(at(APRIL))

    assert result.rows == expected
    # Months whose every row goes are dropped whole. March of node changes holds each
    # node's last change and January of job changes the running job 2: row by row.
    assert sorted(result.dropped) == [
        "clusters_nodestatechange_2026_01",
        "clusters_nodestatechange_2026_02",
        "health_healthevent_2026_01",
        "health_healthevent_2026_03",
        "jobs_jobstatechange_2026_02",
    ]
    names = {month.name for history in HISTORY_TABLES for month in months(history)}
    assert "clusters_nodestatechange_2026_01" not in names
    assert "jobs_jobstatechange_2026_01" in names
    assert sorted(NodeStateChange.objects.values_list("node__name", "to_status")) == [
        ("n1", "idle"),
        ("n2", "allocated"),
    ]
    assert list(JobStateChange.objects.values_list("job__slurm_id", flat=True)) == [2]
    assert not HealthEvent.objects.exists()


def test_another_clusters_node_keeps_its_last_change_through_dropped_months(quarter, history):
    """o1 (another cluster) changed only on January 1: January and February go whole, its
    one change carried to February 1, then March 1; March ends at the cutoff and stays."""
    from clusters.models import Cluster, Node, NodeStateChange
    from reports.retention import prune

    other = Cluster.objects.create(name="other")
    node = Node.objects.create(cluster=other, name="o1", gpu_count=8)
    only = NodeStateChange.objects.create(node=node, to_status="idle", at=at(3))
    other.history_rolled_until = date(2026, 4, 1)
    other.save(update_fields=["history_rolled_until"])
    result = prune(at(APRIL))
    assert "clusters_nodestatechange_2026_01" in result.dropped
    assert "clusters_nodestatechange_2026_02" in result.dropped
    assert "clusters_nodestatechange_2026_03" not in result.dropped
    kept = NodeStateChange.objects.get(node=node)
    assert (kept.pk, kept.to_status, kept.at) == (only.pk, "idle", at(MARCH))
    assert kept.reason == "status since 2026-01-01 03:00 UTC; earlier history pruned"


def test_a_nodes_last_change_is_carried_out_of_a_month_retention_drops(quarter):
    """Rolled up to May and pruned before mid-April: March ends before the cutoff, so its
    node changes go whole, each node's last change moved to April 1 with its status."""
    from clusters.models import NodeStateChange
    from reports.retention import prune
    from reports.rollups import roll_up

    roll_up(quarter, since=date(2026, 4, 1), until=date(2026, 5, 1))
    last = dict(NodeStateChange.objects.values_list("node__name", "id").order_by("at"))
    cutoff = at(APRIL + 14 * 24)
    dry = prune(cutoff, dry_run=True)

    result = prune(cutoff)

    assert result.rows == dry.rows
    assert result.rows["node_state_changes"] == 3
    assert "clusters_nodestatechange_2026_03" in result.dropped
    carried = NodeStateChange.objects.order_by("node__name")
    assert [(c.node.name, c.pk, c.from_status, c.to_status, c.at, c.actor) for c in carried] == [
        ("n1", last["n1"], "idle", "idle", at(APRIL), "retention"),
        ("n2", last["n2"], "allocated", "allocated", at(APRIL), "retention"),
    ]
    assert carried[0].reason == "status since 2026-03-01 12:00 UTC; earlier history pruned"
    # April has no partition of its own yet: DEFAULT holds the row until ensure_all.
    assert partition_of(NodeStateChange, last["n1"]) == "clusters_nodestatechange_default"
