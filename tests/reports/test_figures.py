"""Report figures on small hand-built histories whose answers are known."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.reports.conftest import RANGE, at

pytestmark = pytest.mark.django_db


def fetch(client, name, **params):
    response = client.get(f"/api/v1/reports/{name}/", {**RANGE, **params})
    assert response.status_code == 200, response.content
    return response.json()


def test_a_node_down_6_of_24_hours_is_75_percent_available(history, manager_client):
    history.node("gpu-01", [(-5, "idle"), (6, "down"), (12, "idle")])
    body = fetch(manager_client, "availability")
    assert body["summary"]["availability_pct"] == 75.0
    assert body["summary"]["installed_gpu_h"] == 192.0
    assert body["tables"]["downtime"]["rows"] == [
        {"node": "gpu-01", "downtime_h": 6.0, "availability_pct": 75.0}
    ]
    assert body["tables"]["faults"]["rows"][0]["down_fail"] == 1


def test_utilization_is_allocated_over_available_gpu_hours(history, manager_client):
    history.node("gpu-01", [(0, "idle")])
    history.node("gpu-02", [(0, "idle"), (12, "drained")])
    # 8 GPUs for 6 hours, then 4 GPUs for 3 hours: 60 GPU-hours.
    history.job(1, 8, [(2, "PENDING"), (4, "RUNNING"), (10, "COMPLETED")])
    history.job(2, 4, [(11, "RUNNING"), (14, "COMPLETED")])
    body = fetch(manager_client, "utilization")
    # Available: 8 GPUs x 24 h + 8 GPUs x 12 h (the second node drained at noon).
    assert body["summary"] == {
        "allocated_gpu_h": 60.0,
        "available_gpu_h": 288.0,
        "utilization_pct": 20.8,
    }


def test_a_requeued_job_counts_each_running_interval(history, manager_client):
    history.node("gpu-01", [(0, "idle")])
    history.job(
        1,
        8,
        [(1, "RUNNING"), (3, "PENDING"), (4, "RUNNING", 1), (5, "COMPLETED", 1)],
    )
    body = fetch(manager_client, "utilization")
    assert body["summary"]["allocated_gpu_h"] == 24.0


def test_a_job_without_state_history_counts_from_its_start_and_end(history, manager_client):
    from jobs.models import Job

    history.node("gpu-01", [(0, "idle")])
    cluster = history.node("gpu-02", [(0, "idle")]).cluster
    Job.objects.create(cluster=cluster, slurm_id=7, gpus=2, start_at=at(1), end_at=at(4))
    body = fetch(manager_client, "utilization")
    assert body["summary"]["allocated_gpu_h"] == 6.0


def test_utilization_by_account_shares_the_whole_fleet(history, manager_client):
    history.node("gpu-01", [(0, "idle")])
    history.job(1, 8, [(0, "RUNNING"), (6, "COMPLETED")], account="llm")
    history.job(2, 8, [(0, "RUNNING"), (12, "COMPLETED")], account="eval")
    body = fetch(manager_client, "utilization", group_by="account")
    rows = {row["group"]: row for row in body["tables"]["utilization"]["rows"]}
    assert rows["llm"]["utilization_pct"] == 25.0
    assert rows["eval"]["utilization_pct"] == 50.0


def test_weekly_buckets_split_an_interval_that_spans_two_weeks(history, manager_client):
    # 2026-01-05 is a Monday; the range starts on Thursday 2026-01-01.
    history.node("gpu-01", [(0, "idle"), (72, "down"), (120, "idle")])
    body = fetch(manager_client, "availability", start="2026-01-01", end="2026-01-14",
                 group_by="week")  # fmt: skip
    rows = body["tables"]["availability"]["rows"]
    assert [row["bucket"] for row in rows] == ["2026-01-01", "2026-01-08"]
    # Down from Jan 4 00:00 to Jan 6 00:00: all of it in the first 7-day bucket.
    assert rows[0]["healthy_gpu_h"] == 8 * (7 * 24 - 48)
    assert rows[1]["healthy_gpu_h"] == 8 * 7 * 24


def test_a_job_losing_30_minutes_of_16_gpus_loses_8_gpu_hours(history, manager_client):
    from jobs.models import JobProgress

    history.node("gpu-01", [(0, "idle")], gpus=16)
    job = history.job(
        1,
        16,
        [(0, "PENDING"), (1, "RUNNING"), (3.5, "PENDING"), (4, "RUNNING", 1),
         (6, "COMPLETED", 1)],
    )  # fmt: skip
    JobProgress.objects.create(job=job, step=100, checkpoint_saved=True, reported_at=at(3))
    JobProgress.objects.create(job=job, step=101, restart_count=1, reported_at=at(4.25))
    body = fetch(manager_client, "goodput")
    row = body["tables"]["by_account"]["rows"][0]
    assert row["allocated_gpu_h"] == 16 * 4.5
    assert row["lost_gpu_h"] == 8.0
    assert row["restore_gpu_h"] == 4.0  # 15 minutes reloading on 16 GPUs
    assert row["productive_gpu_h"] == 72 - 8 - 4
    assert body["tables"]["by_job"]["rows"][0]["job"] == 1
    assert body["summary"]["goodput_pct"] == 83.3


def test_the_top_jobs_are_those_that_held_the_most_gpu_hours_whatever_else_changed_later(
    history, manager_client, monkeypatch
):
    from jobs.models import Job

    monkeypatch.setattr("reports.goodput.TOP_JOBS", 2)
    history.node("gpu-01", [(0, "idle")])
    # Ran 2 h on 64 GPUs, but its row was touched 20 h later (a reason edited): what
    # it may have held looks largest, what it held is not.
    touched = history.job(1, 64, [(0, "RUNNING"), (2, "COMPLETED")], start_at=at(0), end_at=at(2))
    Job.objects.filter(pk=touched.pk).update(updated_at=at(22))
    history.job(2, 8, [(0, "RUNNING"), (20, "COMPLETED")], start_at=at(0), end_at=at(20))
    # Requeued: its start time is its last start, so only its history says how long it ran.
    history.job(
        3, 16, [(0, "RUNNING"), (9, "PENDING"), (10, "RUNNING", 1), (12, "COMPLETED", 1)],
        start_at=at(10), end_at=at(12),
    )  # fmt: skip
    history.job(4, 4, [(1, "RUNNING")], start_at=at(1))  # still running: 23 h by the day's end
    body = fetch(manager_client, "goodput")
    jobs = [(row["job"], row["allocated_gpu_h"]) for row in body["tables"]["by_job"]["rows"]]
    assert jobs == [(3, 176.0), (2, 160.0)]
    monkeypatch.setattr("reports.goodput.TOP_JOBS", 4)
    body = fetch(manager_client, "goodput")
    jobs = [(row["job"], row["allocated_gpu_h"]) for row in body["tables"]["by_job"]["rows"]]
    assert jobs == [(3, 176.0), (2, 160.0), (1, 128.0), (4, 92.0)]


def test_lost_work_is_unknown_for_jobs_that_never_report_progress(history, manager_client):
    history.node("gpu-01", [(0, "idle")])
    history.job(1, 8, [(0, "RUNNING"), (2, "NODE_FAIL")])
    body = fetch(manager_client, "goodput", group_by="user")
    row = body["tables"]["by_user"]["rows"][0]
    assert (row["user"], row["lost_gpu_h"], row["unknown_interruptions"]) == ("alice", 0.0, 1)
    assert row["goodput_pct"] == 100.0
    assert any("unknown" in note for note in body["notes"])


def test_mttr_is_the_mean_of_successful_runs_per_action(history, manager_client):
    from remediation.models import Remediation

    node = history.node("gpu-01", [(0, "idle")])
    for minutes, status in ((4, "succeeded"), (8, "succeeded"), (60, "failed")):
        Remediation.objects.create(
            node=node, action="replace", trigger="health_event", status=status, reason="x",
            created_at=at(1), finished_at=at(1) + timedelta(minutes=minutes),
        )  # fmt: skip
    Remediation.objects.create(
        node=node, action="reboot", trigger="admin", status="succeeded", reason="x",
        created_at=at(2), finished_at=at(2) + timedelta(minutes=20),
        decided_at=at(2) + timedelta(minutes=3),
    )  # fmt: skip
    body = fetch(manager_client, "reliability")
    mttr = {row["action"]: row for row in body["tables"]["mttr"]["rows"]}
    assert (mttr["Replace"]["runs"], mttr["Replace"]["mttr_min"]) == (2, 6.0)
    assert mttr["Replace"]["reference_min"] == 5.0
    assert mttr["Reboot"]["mttr_min"] == 20.0
    summary = fetch(manager_client, "remediation")
    runs = {row["action"]: row for row in summary["tables"]["runs"]["rows"]}
    assert (runs["Replace"]["automatic"], runs["Replace"]["failed"]) == (3, 1)
    assert runs["Reboot"]["admin"] == 1
    assert summary["tables"]["approvals"]["rows"][0]["mean_wait_min"] == 3.0


def test_faults_are_counted_by_xid_and_check_and_give_an_mtbf(history, manager_client):
    from health.models import HealthEvent, Incident

    node = history.node("gpu-01", [(0, "idle")])
    for hour, xid in ((1, 79), (2, 79), (3, 48)):
        HealthEvent.objects.create(
            node=node, kind="xid", xid=xid, gpu_index=0, severity="critical",
            observed_at=at(hour), last_observed_at=at(hour), fold_key=f"k{hour}",
        )  # fmt: skip
    HealthEvent.objects.create(
        node=node, kind="check", check_name="dcgm_diag", status="fail", severity="critical",
        observed_at=at(4), last_observed_at=at(4), fold_key="c",
    )  # fmt: skip
    Incident.objects.create(
        node=node, gpu_index=0, opened_at=at(1), last_event_at=at(2), severity="critical"
    )
    body = fetch(manager_client, "reliability")
    counts = {row["source"]: row["events"] for row in body["tables"]["faults"]["rows"]}
    assert counts == {"XID 79": 2, "XID 48": 1, "dcgm_diag": 1}
    mtbf = {row["scope"]: row for row in body["tables"]["mtbf"]["rows"]}
    assert (mtbf["node"]["failures"], mtbf["node"]["mtbf_h"]) == (1, 24.0)
    assert mtbf["GPU"]["mtbf_h"] == 192.0


def test_training_share_follows_inference_and_spare_statuses(history, manager_client):
    history.node("gpu-01", [(0, "allocated")])
    history.node("gpu-02", [(0, "inference"), (12, "spare")])
    body = fetch(manager_client, "training_share")
    assert body["summary"] == {"training_pct": 50.0, "inference_pct": 25.0, "spare_pct": 25.0}


@pytest.mark.parametrize(
    "name", ["utilization", "training_share", "availability", "reliability", "goodput",
             "remediation"],
)  # fmt: skip
def test_an_empty_range_gives_zeros_and_a_message(name, manager_client):
    body = fetch(manager_client, name, start="2025-02-01", end="2025-02-03")
    assert body["message"]
    numbers = [value for value in body["summary"].values() if isinstance(value, int | float)]
    assert all(value == 0 for value in numbers)
