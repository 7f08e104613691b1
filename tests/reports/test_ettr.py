"""ETTR and badput by cause: known answers from hand-built job stories."""

from __future__ import annotations

import pytest

from tests.reports.conftest import RANGE, at

pytestmark = pytest.mark.django_db


@pytest.fixture
def stories(history):
    """Job 100 (8 GPUs, llm): XID at 02:30 on gpu-01, drained 02:45, requeued 03:00,
    replace step 03:00-03:20, running again 03:40, first report 03:50, done 06:00;
    its last checkpoint before the fault was at 01:30.
    Job 101 (4 GPUs, nlp): requeued by hand at 02:00, never reported progress.
    Job 102 (2 GPUs, llm): ran 01:00-03:00 without a restart."""
    from clusters.remediation.models import Remediation, RemediationJob, RemediationStep
    from health.models import Incident, Severity
    from jobs.models import JobProgress

    node = history.node("gpu-01", [(0, "idle")])
    hundred = history.job(
        100, 8, [(1, "RUNNING"), (3, "REQUEUED", 1), (3, "PENDING", 1), (3 + 40 / 60, "RUNNING", 1),
                 (6, "COMPLETED", 1)],
        account="llm", submit_at=at(0.5), start_at=at(3 + 40 / 60), end_at=at(6), restart_count=1,
        state="COMPLETED",
    )  # fmt: skip
    for hour, saved, restarts in ((1.5, True, 0), (2.0, False, 0), (3 + 50 / 60, False, 1)):
        JobProgress.objects.create(
            job=hundred, step=int(hour * 100), checkpoint_saved=saved, restart_count=restarts,
            reported_at=at(hour),
        )  # fmt: skip
    incident = Incident.objects.create(
        node=node, gpu_index=3, opened_at=at(2.5), last_event_at=at(2.5),
        severity=Severity.CRITICAL, xids=[79],
    )  # fmt: skip
    run = Remediation.objects.create(
        node=node, action="replace", trigger="health_event", status="succeeded", reason="XID 79",
        incident=incident, created_at=at(2.5), updated_at=at(3.5), due_at=at(2.5),
        finished_at=at(3.5),
    )  # fmt: skip
    for index, (name, start, end) in enumerate(
        (("drain", 2 + 40 / 60, 2.75), ("requeue_jobs", 3, 3), ("replace", 3, 3 + 20 / 60))
    ):
        RemediationStep.objects.create(
            remediation=run, index=index, name=name, outcome="succeeded",
            started_at=at(start), finished_at=at(end),
        )  # fmt: skip
    RemediationJob.objects.create(
        remediation=run, slurm_job_id=100, effect="signalled", at=at(2.75)
    )
    RemediationJob.objects.create(remediation=run, slurm_job_id=100, effect="requeued", at=at(3))
    history.job(
        101, 4, [(1, "RUNNING"), (2, "REQUEUED", 1), (2.5, "RUNNING", 1), (4, "COMPLETED", 1)],
        account="nlp", user="bob", submit_at=at(0.5), start_at=at(2.5), end_at=at(4),
        restart_count=1, state="COMPLETED",
    )  # fmt: skip
    history.job(
        102, 2, [(1, "RUNNING"), (3, "COMPLETED")],
        account="llm", submit_at=at(0.5), start_at=at(1), end_at=at(3), state="COMPLETED",
    )  # fmt: skip


def report(client):
    body = client.get("/api/v1/reports/ettr/", RANGE).json()
    jobs = {row["job"]: row for row in body["tables"]["by_job"]["rows"]}
    accounts = {row["account"]: row for row in body["tables"]["by_account"]["rows"]}
    return body, jobs, accounts


def test_a_replaced_jobs_badput_splits_into_each_cause(manager_client, stories):
    _, jobs, _ = report(manager_client)
    job = jobs[100]
    assert job["wall_h"] == 5.0
    # 8 GPUs x: 60 min since the checkpoint, 15 detecting, 15 of grace, 20 replacing,
    # 20 more in the queue, 10 restoring.
    assert job["lost_progress_gpu_h"] == 8.0
    assert job["detection_gpu_h"] == 2.0
    assert job["checkpoint_grace_gpu_h"] == 2.0
    assert job["node_replacement_gpu_h"] == 2.67
    assert job["queue_after_requeue_gpu_h"] == 2.67
    assert job["restore_gpu_h"] == 1.33
    assert job["other_gpu_h"] == 0.0
    # 260 minutes running, 100 of them badput: 160 of 300 minutes productive.
    assert job["productive_gpu_h"] == 21.33
    assert job["ettr_pct"] == 53.3
    assert job["estimates"] == ""


def test_a_job_without_progress_reports_says_which_terms_are_estimates(manager_client, stories):
    _, jobs, _ = report(manager_client)
    job = jobs[101]
    assert job["lost_progress_gpu_h"] == 4.0  # the whole first hour, counted as lost
    assert job["queue_after_requeue_gpu_h"] == 2.0
    assert job["ettr_pct"] == 50.0
    assert job["estimates"] == "lost progress, restore"


def test_a_job_that_never_restarted_has_an_ettr_of_100(manager_client, stories):
    _, jobs, _ = report(manager_client)
    assert jobs[102]["ettr_pct"] == 100.0


def test_accounts_and_the_cluster_weigh_jobs_by_gpus(manager_client, stories):
    body, _, accounts = report(manager_client)
    # llm: (8 x 160 + 2 x 120) / (8 x 300 + 2 x 120) GPU-minutes.
    assert accounts["llm"]["ettr_pct"] == round(100 * (8 * 160 + 2 * 120) / (8 * 300 + 2 * 120), 1)
    assert accounts["llm"]["jobs"] == 2
    assert accounts["nlp"]["ettr_pct"] == 50.0
    expected = 100 * (8 * 160 + 2 * 120 + 4 * 90) / (8 * 300 + 2 * 120 + 4 * 180)
    assert body["summary"]["cluster ETTR %"] == round(expected, 1)


def test_the_page_defines_every_term_and_names_its_sources(manager_client, stories):
    html = manager_client.get("/reports/ettr/", RANGE).content.decode()
    for words in ("HPCA 2025", "ML Productivity", "detection: the fault", "checkpoint grace",
                  "restore: running", "queue after"):  # fmt: skip
        assert words in html


def test_the_report_reads_a_fixed_number_of_queries_however_many_jobs(history, stories):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from portal.reports.ettr import ettr
    from portal.reports.params import ReportForm

    form = ReportForm(RANGE)
    assert form.is_valid()

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            ettr(form.query())
        return len(captured.captured_queries)

    before = queries()
    restarted = [(1, "RUNNING"), (2, "REQUEUED", 1), (2.5, "RUNNING", 1), (4, "COMPLETED", 1)]
    for slurm_id in range(200, 220):
        history.job(
            slurm_id, 2, restarted,
            submit_at=at(0.5), start_at=at(2.5), end_at=at(4), restart_count=1, state="COMPLETED",
        )  # fmt: skip
    assert queries() == before
