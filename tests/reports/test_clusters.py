"""Reports per cluster and combined (issue 32: "Reports can be read per cluster and combined").

Two clusters, "hist" and "west", each with a day of the same kind (2026-01-01): nodes
named alike in both (gpu-01, gpu-02), a node failure with its incident, events and a
replace run, a breaker trip, a requeued job with progress reports, a small job and
their accounting records. West is bigger and fails for longer, so its figures differ.
Each cluster's sums add up to the combined view's; its ratios are recomputed from the
combined sums, never averaged.
"""

from __future__ import annotations

from datetime import date

import pytest

from reports.base import percent
from reports.catalog import REPORTS
from tests.reports.conftest import RANGE, at

pytestmark = pytest.mark.django_db

# The summary figures of each report that are sums, so each cluster's add up to the
# combined one's. Ratios (utilization, availability, goodput, ETTR, MTBF...) are not.
SUMS = {
    "utilization": ("allocated_gpu_h", "available_gpu_h"),
    "training_share": (),  # only shares in its summary: its table's GPU-hours add up
    "availability": ("installed_gpu_h", "healthy_gpu_h"),
    "reliability": ("fault_events", "failures", "repairs"),
    "goodput": (
        "allocated_gpu_h", "lost_gpu_h", "restore_gpu_h", "productive_gpu_h",
        "unknown_interruptions",
    ),
    "remediation": ("runs", "automatic", "admin", "breaker_trips", "suppressed"),
    "accounting": ("GPU-h", "jobs ended", "restarts"),
    "lemons": ("nodes tested",),
    "failures": ("failures",),
    "ettr": (
        "jobs", "lost_gpu_h", "restore_gpu_h", "node_replacement_gpu_h",
        "queue_after_requeue_gpu_h",
    ),
}  # fmt: skip
# (table, column) whose totals add up, where the summary has no sums.
TABLE_SUMS = {
    "training_share": [
        ("training_share", "training_gpu_h"),
        ("training_share", "inference_gpu_h"),
    ]
}


def busy_day(history, *, down_hours: float, extra_node: bool):
    """One cluster's day; the node gpu-01 is out of service for DOWN_HOURS from 06:00."""
    from health.models import HealthEvent, Incident
    from jobs.models import AccountingJob, JobProgress
    from remediation.models import (
        BreakerRefusal,
        BreakerTrip,
        Remediation,
        RemediationJob,
        RemediationStep,
    )

    failing = history.node("gpu-01", [(0, "idle"), (6, "fail"), (6 + down_hours, "idle")])
    other = history.node("gpu-02", [(0, "idle"), (18, "inference")])
    if extra_node:
        extra = history.node("gpu-03", [(0, "idle"), (12, "inference")], gpus=4)
        Remediation.objects.create(
            node=extra, action="reboot", trigger="admin", status="failed", reason="slow",
            created_at=at(11), finished_at=at(11.5),
        )  # fmt: skip
    incident = Incident.objects.create(
        node=failing, gpu_index=3, opened_at=at(6), last_event_at=at(6), severity="critical",
        xids=[79],
    )  # fmt: skip
    for node, hour, xid, severity in ((failing, 6, 79, "critical"), (other, 12, 31, "warning")):
        HealthEvent.objects.create(
            node=node, kind="xid", xid=xid, gpu_index=3, severity=severity,
            observed_at=at(hour), last_observed_at=at(hour), fold_key=f"x{hour}",
        )  # fmt: skip
    run = Remediation.objects.create(
        node=failing, action="replace", trigger="health_event", status="succeeded",
        reason="XID 79", incident=incident, created_at=at(6.1),
        finished_at=at(6 + down_hours / 2),
    )  # fmt: skip
    RemediationStep.objects.create(
        remediation=run, index=0, name="replace", outcome="succeeded",
        started_at=at(6.2), finished_at=at(6.4),
    )  # fmt: skip
    RemediationJob.objects.create(
        remediation=run, slurm_job_id=1, effect="requeued", nodes=["gpu-01"], at=at(6)
    )
    Remediation.objects.create(
        node=other, action="cordon", trigger="admin", status="succeeded", reason="look",
        created_at=at(14), finished_at=at(14.2),
    )  # fmt: skip
    trip = BreakerTrip.objects.create(
        cluster=other.cluster, partition="train", opened_at=at(6.5), reason="too many", suppressed=2
    )
    BreakerRefusal.objects.create(
        trip=trip, node=other, action="replace", reason="too many", at=at(6.5)
    )
    job = history.job(
        1, 8,
        [(0, "PENDING"), (1, "RUNNING"), (6, "PENDING", 1), (7, "RUNNING", 1),
         (10, "COMPLETED", 1)],
        state="COMPLETED", submit_at=at(0), start_at=at(1), end_at=at(10), restart_count=1,
    )  # fmt: skip
    JobProgress.objects.create(job=job, step=50, checkpoint_saved=True, reported_at=at(5))
    JobProgress.objects.create(job=job, step=51, restart_count=1, reported_at=at(7.25))
    # A job that never reports progress: its interruption's loss is unknown.
    history.job(
        3, 2, [(1, "PENDING"), (2, "RUNNING"), (4, "NODE_FAIL")],
        state="NODE_FAIL", submit_at=at(1), start_at=at(2), end_at=at(4),
    )  # fmt: skip
    gpus = 4 if extra_node else 2
    small = history.job(
        2, gpus, [(11, "PENDING"), (12, "RUNNING"), (16, "COMPLETED")],
        state="COMPLETED", submit_at=at(11), start_at=at(12), end_at=at(16), account="vision",
    )  # fmt: skip
    for owner, submit, start, end, state, used, restarts in (
        (job, 0, 1, 6, "REQUEUED", 8, 0),
        (job, 6, 7, 10, "COMPLETED", 8, 1),
        (small, 11, 12, 16, "COMPLETED", gpus, 0),
    ):
        AccountingJob.objects.create(
            cluster=history.cluster, slurm_id=owner.slurm_id, job=owner, submit_at=at(submit),
            account=owner.account, user="alice", partition="train", qos="normal", state=state,
            start_at=at(start), end_at=at(end), elapsed_s=int((end - start) * 3600),
            gpus=used, restarts=restarts,
        )  # fmt: skip


@pytest.fixture
def two_clusters(history, history_of):
    busy_day(history, down_hours=3, extra_node=False)
    busy_day(history_of("west"), down_hours=5, extra_node=True)


def report(client, name: str, cluster: str | None = None, path: str = "/") -> dict:
    params = {**RANGE, **({"cluster": cluster} if cluster is not None else {})}
    response = client.get(f"/api/v1/reports/{name}{path}", params)
    assert response.status_code == 200, response.content
    return response.json()


def every_view(client, name: str) -> tuple[dict, dict, dict]:
    return tuple(report(client, name, cluster) for cluster in ("hist", "west", "all"))


def column_total(found: dict, table: str, column: str) -> float:
    return sum(row[column] for row in found["tables"][table]["rows"])


def test_every_report_says_which_sums_add_up():
    assert set(SUMS) == set(REPORTS)


@pytest.mark.parametrize("name", list(REPORTS))
def test_each_clusters_sums_add_up_to_the_combined_figures(name, two_clusters, manager_client):
    hist, west, combined = every_view(manager_client, name)
    assert (hist["cluster"], west["cluster"], combined["cluster"]) == ("hist", "west", "all")
    for key in SUMS[name]:
        one, two, both = hist["summary"][key], west["summary"][key], combined["summary"][key]
        assert one and two, (key, one, two)  # each cluster has some: the filter can fail
        assert one + two == pytest.approx(both, abs=0.011), key  # hours rounded per view
    for table, column in TABLE_SUMS.get(name, []):
        one, two = column_total(hist, table, column), column_total(west, table, column)
        assert one and two, (table, column)
        assert one + two == pytest.approx(column_total(combined, table, column), abs=0.011)
    # The two clusters' days differ, so a view showing another cluster's figures is caught.
    assert hist["summary"] != west["summary"] or hist["tables"] != west["tables"]


def test_combined_utilization_is_the_combined_busy_over_the_combined_total(
    two_clusters, manager_client
):
    hist, west, combined = every_view(manager_client, "utilization")
    busy = hist["summary"]["allocated_gpu_h"] + west["summary"]["allocated_gpu_h"]
    total = hist["summary"]["available_gpu_h"] + west["summary"]["available_gpu_h"]
    assert combined["summary"]["utilization_pct"] == pytest.approx(percent(busy, total), abs=0.05)
    # Not the mean of the two clusters' utilizations (their totals differ).
    mean = (hist["summary"]["utilization_pct"] + west["summary"]["utilization_pct"]) / 2
    assert combined["summary"]["utilization_pct"] != pytest.approx(mean, abs=0.05)


def test_combined_mtbf_is_the_combined_hours_over_the_combined_failures(
    two_clusters, manager_client
):
    views = every_view(manager_client, "reliability")
    node_rows = [
        next(row for row in view["tables"]["mtbf"]["rows"] if row["scope"] == "node")
        for view in views
    ]
    hours = node_rows[0]["in_service_h"] + node_rows[1]["in_service_h"]
    failures = node_rows[0]["failures"] + node_rows[1]["failures"]
    assert node_rows[2]["mtbf_h"] == pytest.approx(hours / failures, abs=0.01)


def test_nodes_named_alike_in_two_clusters_stay_apart_when_combined(two_clusters, manager_client):
    combined = report(manager_client, "failures", "all")
    assert [row["node"] for row in combined["tables"]["by_node"]["rows"]] == [
        "hist/gpu-01",
        "west/gpu-01",
    ]
    # One cluster's view names its nodes as that cluster does.
    west = report(manager_client, "failures", "west")
    assert [row["node"] for row in west["tables"]["by_node"]["rows"]] == ["gpu-01"]
    lemons = report(manager_client, "lemons", "all")
    assert lemons["summary"]["nodes tested"] == 5


def test_job_ids_used_in_two_clusters_stay_apart_when_combined(two_clusters, manager_client):
    combined = report(manager_client, "goodput", "all")
    held = {row["job"]: row["allocated_gpu_h"] for row in combined["tables"]["by_job"]["rows"]}
    # Job 1 ran 8 GPUs x 8 h in each cluster; job 2 on 2 GPUs in hist, 4 in west, for 4 h.
    assert held == {
        "hist/1": 64.0, "west/1": 64.0, "west/2": 16.0, "hist/2": 8.0, "hist/3": 4.0,
        "west/3": 4.0,
    }  # fmt: skip
    west = report(manager_client, "goodput", "west")
    assert [row["job"] for row in west["tables"]["by_job"]["rows"]] == [1, 2, 3]
    ettr = report(manager_client, "ettr", "all")
    assert sorted(row["job"] for row in ettr["tables"]["by_job"]["rows"]) == ["hist/1", "west/1"]


def test_a_per_cluster_csv_holds_only_that_clusters_rows(two_clusters, manager_client):
    response = manager_client.get(
        "/api/v1/reports/availability.csv", {**RANGE, "cluster": "west", "table": "downtime"}
    )
    assert response.status_code == 200
    assert (
        'filename="availability-downtime-west-2026-01-01-2026-01-01.csv"'
        in (response["Content-Disposition"])
    )
    lines = response.content.decode().splitlines()
    assert lines[1].startswith("gpu-01,5.0,")  # west's gpu-01 was out 5 h (hist's 3 h)
    assert len(lines) == 2


def test_all_and_no_cluster_read_the_same_combined_figures(two_clusters, manager_client):
    assert report(manager_client, "utilization", "all") == report(manager_client, "utilization")


def test_an_unknown_cluster_is_a_400_naming_the_known_clusters(two_clusters, manager_client):
    for path in ("/", ".csv"):
        response = manager_client.get(f"/api/v1/reports/goodput{path}", {"cluster": "east"})
        assert response.status_code == 400
        (message,) = response.json()["errors"]["cluster"]
        assert "'east'" in message and "hist, west" in message


def test_the_page_answers_an_unknown_cluster_with_a_form_error(two_clusters, manager_client):
    response = manager_client.get("/reports/utilization/", {"cluster": "east"})
    assert response.status_code == 200
    page = response.content.decode()
    assert "Please fix the filters" in page and "Known clusters: hist, west" in page


def test_the_page_offers_the_clusters_and_says_which_it_shows(two_clusters, manager_client):
    page = manager_client.get("/reports/utilization/", {**RANGE, "cluster": "west"})
    html = page.content.decode()
    assert '<select name="cluster"' in html
    assert '<option value="west" selected>west</option>' in html
    assert "GPU utilization <span" in html and "· cluster west" in html
    # The tabs and the exports keep the cluster.
    tab = "/reports/ettr/?start=2026-01-01&amp;end=2026-01-01&amp;group_by=day&amp;cluster=west"
    assert tab in html
    combined = manager_client.get("/reports/utilization/", RANGE).content.decode()
    assert "· all clusters" in combined
    assert '<option value="all" selected>all clusters</option>' in combined


def test_one_cluster_gets_no_cluster_field(history, manager_client):
    history.node("gpu-01", [(0, "idle")])
    html = manager_client.get("/reports/utilization/", RANGE).content.decode()
    assert 'name="cluster"' not in html and "all clusters" not in html


def test_rolled_up_days_are_read_per_cluster(two_clusters, manager_client):
    from clusters.models import Cluster
    from reports.params import ReportForm
    from reports.rollups import roll_up, rollup_edge

    names = ("utilization", "availability", "reliability", "lemons", "failures", "goodput")
    raw = {(name, view): report(manager_client, name, view) for name in names for view in
           ("hist", "west", "all")}  # fmt: skip
    roll_up(Cluster.objects.get(name="hist"), until=date(2026, 1, 3))

    def span(cluster):
        form = ReportForm({**RANGE, "cluster": cluster})
        assert form.is_valid(), form.errors
        return form.query().span()

    # Hist's view reads its rollups; west's and the combined one, raw rows only, as
    # west's days are not rolled up yet.
    assert rollup_edge(span("hist")) is not None
    assert rollup_edge(span("west")) is None and rollup_edge(span("all")) is None
    roll_up(Cluster.objects.get(name="west"), until=date(2026, 1, 2))
    assert rollup_edge(span("all")) is not None
    for (name, view), figures in raw.items():
        assert report(manager_client, name, view) == figures, (name, view)


def test_a_report_without_a_cluster_reads_the_one_chosen_in_the_switcher(
    two_clusters, manager_client, manager
):
    from identity.cluster_view import choose_cluster

    combined = report(manager_client, "utilization")
    choose_cluster(manager, "west")
    assert report(manager_client, "utilization") == report(manager_client, "utilization", "west")
    assert report(manager_client, "utilization") != combined
    choose_cluster(manager, "all")
    assert report(manager_client, "utilization") == combined
