"""The accounting report: known answers by account, user, partition and QOS, and its exports."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest

from tests.reports.conftest import RANGE, at

pytestmark = pytest.mark.django_db


@pytest.fixture
def records(db):
    """Slurm's accounting for 2026-01-01 as the import stores it."""
    from clusters.models import Cluster
    from jobs.models import AccountingJob

    cluster = Cluster.objects.create(name="acct")

    def record(slurm_id, start, end, gpus, state="COMPLETED", *, team="vision", **fields):
        defaults = {"user": "alice" if team == "vision" else "bob", "account": team}
        defaults.update(partition="train", qos="normal")
        defaults.update(fields)
        submitted = at(start if start is not None else end) - timedelta(minutes=30)
        return AccountingJob.objects.create(
            cluster=cluster,
            slurm_id=slurm_id,
            submit_at=submitted,
            start_at=at(start) if start is not None else None,
            end_at=at(end),
            elapsed_s=int((end - (start if start is not None else end)) * 3600),
            gpus=gpus,
            state=state,
            **defaults,
        )

    record(1, 1, 3, 8)  # 16 GPU-h
    record(2, 4, 5, 4, "REQUEUED")  # 4 GPU-h lost to a requeue
    record(2, 5, 6, 4, restarts=1)  # its final attempt, 4 GPU-h
    # Bob's: one started the day before (2 of its 4 hours count), one runs past midnight.
    record(3, -2, 2, 2, "FAILED", team="nlp", partition="infer", qos="high")
    record(4, 23, 27, 1, "TIMEOUT", team="nlp", partition="infer", qos="high")
    record(5, None, 8, 0, "CANCELLED", team="nlp", qos="high")  # cancelled while pending
    return record


def report(client, **params):
    response = client.get("/api/v1/reports/accounting/", {**RANGE, **params})
    assert response.status_code == 200, response.content
    return response.json()


def rows_by_group(body):
    return {row["group"]: row for row in body["tables"]["usage"]["rows"]}


def test_gpu_hours_by_account_count_every_attempt_inside_the_range(manager_client, records):
    body = report(manager_client, group_by="account")
    rows = rows_by_group(body)
    assert rows["vision"]["gpu_h"] == 24.0
    assert rows["vision"]["gpu_s"] == 24 * 3600
    assert rows["nlp"]["gpu_h"] == 5.0  # 4 of the job from the day before, 1 before midnight
    assert rows["vision"]["requeued_gpu_h"] == 4.0
    assert rows["vision"]["share_pct"] == 82.8
    assert body["summary"]["GPU-h"] == 29.0


def test_jobs_failures_and_restarts_count_final_attempts_that_ended_in_the_range(
    manager_client, records
):
    rows = rows_by_group(report(manager_client, group_by="account"))
    vision, nlp = rows["vision"], rows["nlp"]
    assert (vision["jobs"], vision["failed"], vision["restarts"]) == (2, 0, 1)
    # Job 4 ends the next day: its hour counts, the job does not.
    assert (nlp["jobs"], nlp["failed"], nlp["cancelled"]) == (2, 1, 1)


def test_the_report_splits_by_user_partition_and_qos(manager_client, records):
    by_user = rows_by_group(report(manager_client, group_by="user"))
    assert {name: row["gpu_h"] for name, row in by_user.items()} == {"alice": 24.0, "bob": 5.0}
    by_partition = rows_by_group(report(manager_client, group_by="partition"))
    assert {name: row["gpu_h"] for name, row in by_partition.items()} == {
        "train": 24.0,
        "infer": 5.0,
    }
    by_qos = rows_by_group(report(manager_client, group_by="qos"))
    assert by_qos["high"]["gpu_h"] == 5.0 and by_qos["high"]["failed"] == 1


def test_mean_queue_wait_is_from_each_attempts_submit_to_its_start(manager_client, records):
    rows = rows_by_group(report(manager_client, group_by="account"))
    assert rows["vision"]["mean_wait_min"] == 30.0


def test_a_grouping_it_does_not_split_by_falls_back_to_accounts_and_says_so(
    manager_client, records
):
    body = report(manager_client, group_by="pool")
    assert set(rows_by_group(body)) == {"vision", "nlp"}
    assert any("Grouped by account" in note for note in body["notes"])


def test_an_empty_range_says_to_run_the_import(manager_client, records):
    body = report(manager_client, start="2025-06-01", end="2025-06-02")
    assert "import_accounting" in body["message"]
    assert body["tables"]["usage"]["rows"] == []


def test_the_csv_export_has_the_same_figures(manager_client, records):
    response = manager_client.get("/api/v1/reports/accounting.csv", {**RANGE, "group_by": "qos"})
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert {row["group"]: row["gpu_h"] for row in rows} == {"normal": "24.0", "high": "5.0"}


def test_the_page_shows_the_table_and_a_figure(manager_client, records):
    response = manager_client.get("/reports/accounting/", {**RANGE, "group_by": "user"})
    html = response.content.decode()
    assert response.status_code == 200
    assert 'id="figure-data-accounting-1"' in html
    assert "sreport job SizesByAccount" in html
    assert "alice" in html and "bob" in html


def test_researchers_may_not_read_it(client, researcher, records):
    client.force_login(researcher)
    assert client.get("/api/v1/reports/accounting/", RANGE).status_code == 403
