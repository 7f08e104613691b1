"""ETTR and badput by cause: known answers from hand-built job stories."""

from __future__ import annotations

from datetime import timedelta

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
    from health.models import Incident, Severity
    from jobs.models import JobProgress
    from remediation.models import Remediation, RemediationJob, RemediationStep

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


def test_a_job_that_never_restarted_counts_whole_in_its_account_not_among_the_lossy(
    manager_client, stories
):
    _, jobs, accounts = report(manager_client)
    assert 102 not in jobs  # it lost nothing: the table lists the jobs that lost time
    assert set(jobs) == {100, 101}
    assert accounts["llm"]["jobs"] == 2  # 100 and 102, 102 productive throughout


def test_accounts_and_the_cluster_weigh_jobs_by_gpus(manager_client, stories):
    body, _, accounts = report(manager_client)
    # llm: (8 x 160 + 2 x 120) / (8 x 300 + 2 x 120) GPU-minutes.
    assert accounts["llm"]["ettr_pct"] == round(100 * (8 * 160 + 2 * 120) / (8 * 300 + 2 * 120), 1)
    assert accounts["llm"]["jobs"] == 2
    assert accounts["nlp"]["ettr_pct"] == 50.0
    expected = 100 * (8 * 160 + 2 * 120 + 4 * 90) / (8 * 300 + 2 * 120 + 4 * 180)
    assert body["summary"]["cluster_ettr_pct"] == round(expected, 1)


def test_the_page_defines_every_term_and_names_its_sources(manager_client, stories):
    html = manager_client.get("/reports/ettr/", RANGE).content.decode()
    for words in ("HPCA 2025", "ML Productivity", "detection: the fault", "checkpoint grace",
                  "restore: running", "queue after"):  # fmt: skip
        assert words in html


def test_the_report_reads_a_fixed_number_of_queries_however_many_jobs(history, stories):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from reports.ettr import ettr
    from reports.params import ReportForm

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


def attempt(history_cluster, slurm_id, state, submit, start, end, *, gpus=4, restarts=0, **more):
    from jobs.models import AccountingJob

    more.setdefault("account", "vision")
    return AccountingJob.objects.create(
        cluster=history_cluster, slurm_id=slurm_id, state=state, submit_at=at(submit),
        start_at=at(start) if start is not None else None, end_at=at(end), gpus=gpus,
        elapsed_s=round((end - start) * 3600) if start is not None else 0, restarts=restarts,
        user="carol", partition="train", **more,
    )  # fmt: skip


@pytest.fixture
def before_medbay(history, stories):
    """Jobs Medbay never saw, from Slurm's accounting alone (account vision, 4 GPUs):
    300 ran 01:00-02:00, was requeued, waited until 02:30 and ran to 04:00;
    301 ran 01:00-03:00 once. And job 100's own accounting, which Medbay already tells."""
    from clusters.models import Cluster
    from jobs.models import Job

    cluster = Cluster.objects.get(name="hist")
    attempt(cluster, 300, "REQUEUED", 0.5, 1, 2)
    attempt(cluster, 300, "COMPLETED", 2, 2.5, 4, restarts=1)
    attempt(cluster, 301, "COMPLETED", 0.5, 1, 3)
    hundred = Job.objects.get(slurm_id=100)
    attempt(cluster, 100, "REQUEUED", 0.5, 1, 3, gpus=8, account="llm", job=hundred)
    attempt(cluster, 100, "COMPLETED", 3, 3 + 40 / 60, 6, gpus=8, account="llm", job=hundred,
            restarts=1)  # fmt: skip


def test_a_requeued_job_known_only_from_accounting_has_its_ettr_with_estimates(
    manager_client, before_medbay
):
    _, jobs, _ = report(manager_client)
    job = jobs[300]
    assert job["source"] == "Slurm accounting"
    assert (job["restarts"], job["gpus"], job["wall_h"]) == (1, 4, 3.0)
    # 4 GPUs x: the requeued hour lost, half an hour queued; 1.5 of 3 hours productive.
    assert job["lost_progress_gpu_h"] == 4.0
    assert job["queue_after_requeue_gpu_h"] == 2.0
    assert job["productive_gpu_h"] == 6.0
    assert job["ettr_pct"] == 50.0
    assert job["estimates"] == "lost progress, restore"
    assert jobs[100]["source"] == "Medbay"


def test_accounting_jobs_count_in_their_account_and_medbays_jobs_count_once(
    manager_client, before_medbay
):
    body, jobs, accounts = report(manager_client)
    # vision: 300 (4 x 90 of 180 min) and 301 whole (4 x 120 min).
    assert accounts["vision"]["jobs"] == 2
    vision = 100 * (4 * 90 + 4 * 120) / (4 * 180 + 4 * 120)
    assert accounts["vision"]["ettr_pct"] == round(vision, 1)
    # llm as before: job 100's accounting records add nothing to Medbay's own story.
    assert accounts["llm"]["jobs"] == 2
    assert accounts["llm"]["ettr_pct"] == round(100 * (8 * 160 + 2 * 120) / (8 * 300 + 2 * 120), 1)
    assert body["summary"]["jobs"] == 5
    assert 301 not in jobs


def test_imported_accounting_of_a_real_requeue_gives_its_ettr(manager_client, db):
    """Slurm 22.05's recorded accounting (import_accounting, as from sacct): alice's job 3
    ran 4 s, was requeued, waited 9 s and ran 30 s on 8 GPUs."""
    from clusters.backends.slurm_accounting import finished_in
    from clusters.models import Cluster
    from jobs.accounting import import_accounting
    from tests.jobs.test_accounting_import import DAY, RECORDS

    class Recorded:
        name = "slurm"

        def finished_jobs(self, start, end):
            return finished_in(RECORDS, start, end)

    cluster = Cluster.objects.create(name="before")
    import_accounting(cluster, Recorded(), since=DAY, until=DAY + timedelta(days=1))
    day = {"start": "2026-12-01", "end": "2026-12-01"}
    body = manager_client.get("/api/v1/reports/ettr/", day).json()
    jobs = {row["job"]: row for row in body["tables"]["by_job"]["rows"]}
    accounts = {row["account"]: row for row in body["tables"]["by_account"]["rows"]}
    assert set(jobs) == {3}
    assert jobs[3]["ettr_pct"] == round(100 * 30 / 43, 1)
    # vision: job 1 (2 GPUs x 3 s) whole and job 3 (8 GPUs, 30 of 43 s); nlp lost nothing.
    assert accounts["vision"]["ettr_pct"] == round(100 * (2 * 3 + 8 * 30) / (2 * 3 + 8 * 43), 1)
    assert (accounts["nlp"]["ettr_pct"], accounts["nlp"]["jobs"]) == (100.0, 2)
