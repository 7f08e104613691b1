"""Daily rollups and pruning: the reports' figures are the same from rollups as from raw rows."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from django.core.management import call_command

from tests.reports.conftest import at

REPORTS = (
    "utilization", "training_share", "availability", "reliability", "lemons", "failures",
    "goodput",
)  # fmt: skip
# Goodput's table of top jobs reads each job's own history, which pruning deletes.
KEPT_BY_PRUNING = tuple(name for name in REPORTS if name != "goodput")
QUERIES = [
    {"group_by": "day"},
    {"group_by": "week"},
    {"group_by": "partition"},
    {"group_by": "pool"},
    {"group_by": "account"},
    {"group_by": "user", "bucket": "week"},
]


def figures(names=REPORTS) -> dict:
    from reports.catalog import compute
    from reports.params import ReportForm

    found = {}
    for params in QUERIES:
        form = ReportForm({"start": "2026-01-01", "end": "2026-01-07", **params})
        assert form.is_valid(), form.errors
        for name in names:
            report = compute(name, form.query())
            tables = {table.name: table.rows for table in report.tables}
            found[(name, params["group_by"])] = (report.summary, tables, report.message)
    return found


@pytest.fixture
def week(history):
    """Six days of node, job and fault history over two partitions, with known changes."""
    from clusters.models import Node, NodePool, Partition
    from health.models import HealthEvent, Incident
    from jobs.models import Job

    nodes = [
        history.node("n1", [(0, "idle"), (10, "allocated"), (30, "down"), (33, "idle")]),
        history.node("n2", [(0, "allocated"), (50, "fail"), (51.5, "drained"), (80, "idle")]),
        history.node("n3", [(-5, "idle"), (70, "down"), (71, "idle"), (100, "allocated")]),
        history.node("n4", [(2, "inference"), (60, "drained"), (61, "inference")], gpus=4),
    ]
    infer = Partition.objects.create(cluster=nodes[0].cluster, name="infer")
    pool = NodePool.objects.create(
        cluster=nodes[0].cluster, name="inference", kind="inference", partition=infer
    )
    Node.objects.filter(name="n4").update(pool=pool, partition_names="infer")
    history.job(1, 8, [(10, "RUNNING"), (30, "REQUEUED", 1), (34, "RUNNING", 1),
                       (60, "COMPLETED", 1)], start_at=at(10), end_at=at(60))  # fmt: skip
    history.job(2, 16, [(0, "RUNNING"), (95, "COMPLETED")], start_at=at(0), end_at=at(95),
                account="vision", user="bob")  # fmt: skip
    history.job(3, 8, [(100, "RUNNING")], start_at=at(100))
    Job.objects.create(
        cluster=nodes[0].cluster, slurm_id=4, gpus=4, partition="infer", account="serve",
        user="carol", start_at=at(5), end_at=at(40),
    )  # fmt: skip
    for node, hour, xid in ((nodes[0], 29.5, 79), (nodes[1], 49.9, 48), (nodes[2], 69, 79)):
        incident = Incident.objects.create(
            node=node, gpu_index=0, opened_at=at(hour), last_event_at=at(hour),
            severity="critical", xids=[xid],
        )  # fmt: skip
        HealthEvent.objects.create(
            node=node, incident=incident, kind="xid", xid=xid, gpu_index=0, severity="critical",
            observed_at=at(hour), last_observed_at=at(hour), fold_key=f"x{hour}",
        )  # fmt: skip
    HealthEvent.objects.create(
        node=nodes[3], kind="check", check_name="dcgm_diag", status="fail", severity="critical",
        observed_at=at(61.5), last_observed_at=at(61.5), fold_key="c",
    )  # fmt: skip
    return nodes[0].cluster


def test_the_reports_give_the_same_figures_from_rollups_as_from_raw_rows(week):
    from clusters.models import NodeStateDay
    from jobs.models import JobDay
    from reports.rollups import roll_up

    raw = figures()
    assert roll_up(week, until=date(2026, 1, 4)) > 0  # three days rolled up, the rest raw
    down = NodeStateDay.objects.get(day=date(2026, 1, 2), status="down")
    assert round(down.seconds, 2) == 3 * 3600
    assert figures() == raw
    call_command("rollup_history")  # every whole day up to today
    week.refresh_from_db()
    assert week.history_rolled_until == date.today()
    assert JobDay.objects.filter(account="vision").count() == 4  # Jan 1-4: 95 h
    assert figures() == raw


def rollup_rows() -> list:
    from clusters.models import NodeDayTotal, NodeStateDay

    fleet = NodeStateDay.objects.values_list("day", "status", "gpu_count", "pool_kind", "seconds")
    nodes = NodeDayTotal.objects.values_list("node__name", "day", "installed_s", "down_s", "falls")
    return sorted(fleet) + sorted(nodes)


def test_rolling_a_day_up_twice_writes_the_same_rows(week):
    from reports.rollups import roll_up

    roll_up(week, until=date(2026, 1, 8))
    first = rollup_rows()
    roll_up(week, since=date(2026, 1, 3), until=date(2026, 1, 8))
    assert rollup_rows() == first
    roll_up(week, since=date(2025, 12, 1), until=date(2026, 1, 8))
    assert rollup_rows() == first


def test_the_rollups_hold_seconds_per_status_and_each_nodes_running_totals(week):
    from clusters.models import NodeDayTotal, NodeStateDay
    from reports.rollups import roll_up

    roll_up(week, until=date(2026, 1, 8))
    # SQLite's julianday() arithmetic is exact to ~0.1 ms.
    fail = NodeStateDay.objects.get(day=date(2026, 1, 3), status="fail")
    assert (round(fail.seconds, 2), fail.gpu_count, fail.pool_kind) == (5400.0, 8, "training")
    # n2: allocated until 50 h, fail 50-51.5 h, drained from 51.5 h: through Jan 3 (72 h).
    total = NodeDayTotal.objects.get(node__name="n2", day=date(2026, 1, 3))
    assert (round(total.installed_s, 2), round(total.down_s, 2), total.falls) == (
        72 * 3600.0,
        22 * 3600.0,
        1,
    )


def test_a_node_moved_after_its_days_were_rolled_up_keeps_its_past_in_its_old_pool(week):
    from clusters.models import Node
    from reports.catalog import compute
    from reports.params import ReportQuery
    from reports.rollups import roll_up

    query = ReportQuery(date(2026, 1, 1), date(2026, 1, 7), "day", "")
    availability = compute("availability", query).summary
    roll_up(week)
    Node.objects.filter(name="n1").update(pool=Node.objects.get(name="n4").pool)
    share = compute("training_share", query)
    # n1's 3 hours down on Jan 2 count under its pool of the time, training (read from the
    # raw rows they would move to inference): inference is n4's 4 GPUs all day.
    day = {row["bucket"]: row for row in share.table().rows}["2026-01-02"]
    assert day["inference_gpu_h"] == 4 * 24
    assert compute("availability", query).summary == availability


def test_history_written_into_the_past_forgets_the_rollups(week):
    from clusters.models import NodeStateDay
    from reports.rollups import clear_rollups, roll_up

    roll_up(week, until=date(2026, 1, 8))
    clear_rollups(week)
    week.refresh_from_db()
    assert week.history_rolled_until is None
    assert not NodeStateDay.objects.exists()


def test_pruning_deletes_exactly_the_old_rows_and_the_reports_keep_their_figures(week):
    from clusters.models import NodeStateChange
    from health.models import HealthEvent, Incident
    from jobs.models import JobStateChange
    from reports.retention import prune
    from reports.rollups import roll_up

    before = figures(KEPT_BY_PRUNING)
    cutoff = at(72)  # 2026-01-04 00:00
    roll_up(week)
    expected_nodes = {
        (change.node.name, change.at)
        for change in NodeStateChange.objects.select_related("node")
        # Kept: each node's last change before the cutoff, and everything after it.
        if change.at >= cutoff or (change.node.name, change.at) in {
            ("n1", at(33)), ("n2", at(51.5)), ("n3", at(71)), ("n4", at(61))
        }
    }  # fmt: skip
    result = prune(cutoff)
    assert result.rows == {"node_state_changes": 9, "job_state_changes": 4, "health_events": 4}
    assert {(change.node.name, change.at) for change in NodeStateChange.objects.all()} == (
        expected_nodes
    )
    # Job 1 ended at 60 h: its history went; job 2 (95 h) and job 3 (running) keep theirs.
    assert set(JobStateChange.objects.values_list("job__slurm_id", flat=True)) == {2, 3}
    assert not HealthEvent.objects.exists()
    assert Incident.objects.count() == 3  # kept: the reports count them one by one
    assert figures(KEPT_BY_PRUNING) == before


def test_pruning_keeps_what_the_rollups_do_not_hold_yet(week):
    from clusters.models import NodeStateChange
    from reports.retention import prune
    from reports.rollups import roll_up

    count = NodeStateChange.objects.count()
    assert prune(at(72)).skipped == ["hist"]  # never rolled up: nothing goes
    roll_up(week, until=date(2026, 1, 2))
    prune(at(72))  # only before Jan 2, where the rollups end
    assert NodeStateChange.objects.count() == count - 1  # n1's idle at 0 h; the rest are last
    assert NodeStateChange.objects.filter(at__lt=at(24)).count() == 4


def test_prune_history_counts_in_a_dry_run_and_keeps_everything_by_default(week, settings):
    from io import StringIO

    from clusters.models import NodeStateChange
    from reports.rollups import roll_up

    count = NodeStateChange.objects.count()
    out = StringIO()
    call_command("prune_history", stdout=out)
    assert "keeping all history" in out.getvalue()
    roll_up(week)
    # Every change is older than the cutoff: all go but each node's last one.
    days = (date.today() - date(2026, 1, 9)).days
    call_command("prune_history", "--days", str(days), "--dry-run", stdout=out)
    assert "would delete 11 node_state_changes" in out.getvalue()
    assert "would delete 6 job_state_changes" in out.getvalue()
    assert NodeStateChange.objects.count() == count
    settings.MEDBAY_HISTORY_RETENTION_DAYS = days
    call_command("prune_history", stdout=out)
    assert "deleted 11 node_state_changes" in out.getvalue()
    assert NodeStateChange.objects.count() == count - 11 == 4


def test_a_week_later_the_rollups_still_end_where_they_were_rolled(week):
    from reports.params import ReportQuery
    from reports.rollups import roll_up, rollup_edge

    roll_up(week, until=date(2026, 1, 4))
    span = ReportQuery(date(2026, 1, 1), date(2026, 1, 7), "day", "").span()
    assert rollup_edge(span) == at(72)
    span = ReportQuery(date(2026, 1, 5), date(2026, 1, 7), "day", "").span()
    assert rollup_edge(span) is None
    assert rollup_edge(span.after(at(96))) is None
    assert timedelta(days=1) == span.bucket
