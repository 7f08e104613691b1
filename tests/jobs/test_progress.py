"""The job-scoped token: good while the job runs, useless once it has ended."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobs.models import Job, JobProgress, JobToken
from tests.jobs.conftest import token_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def running_job(researcher, submit_as, synced, submissions):
    slurm_id = submit_as(researcher)
    synced(timedelta(seconds=1))
    job = Job.objects.get(slurm_id=slurm_id)
    assert job.state == "RUNNING"
    # Only the script Slurm got holds the token; the row keeps it hashed.
    job.raw_token = token_in(submissions[-1].script)
    return job


def post_progress(client, slurm_id, token, **body):
    return client.post(
        f"/api/v1/jobs/{slurm_id}/progress/",
        {"step": 4200, "checkpoint_saved": True, "restart_count": 1, **body},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def test_a_running_job_reports_progress_with_its_token(client, running_job):
    response = post_progress(client, running_job.slurm_id, running_job.raw_token)

    assert response.status_code == 201
    report = JobProgress.objects.get(job=running_job)
    assert (report.step, report.checkpoint_saved, report.restart_count) == (4200, True, 1)


def test_the_token_is_refused_after_the_job_ended(client, running_job, sim, synced):
    token = running_job.raw_token
    sim.job(running_job.slurm_id).duration = timedelta(minutes=1)
    synced(timedelta(minutes=5))
    assert Job.objects.get(pk=running_job.pk).state == "COMPLETED"

    first = post_progress(client, running_job.slurm_id, token)
    again = post_progress(client, running_job.slurm_id, token)

    assert first.status_code == 403
    assert "ended" in first.json()["detail"]
    assert again.status_code == 401
    assert JobToken.objects.get(job=running_job).revoked_at is not None
    assert not JobProgress.objects.exists()


def test_a_cancelled_jobs_token_is_revoked_at_once(login, client, running_job, researcher):
    token = running_job.raw_token
    login(researcher).post(f"/api/v1/jobs/{running_job.slurm_id}/cancel/")
    client.logout()

    response = post_progress(client, running_job.slurm_id, token)

    assert response.status_code == 401


def test_a_token_only_works_for_its_own_job(client, running_job, researcher, submit_as):
    other = submit_as(researcher)

    response = post_progress(client, other, running_job.raw_token)

    assert response.status_code == 401


def test_progress_without_a_token_or_with_a_made_up_one_is_unauthorized(client, running_job):
    missing = client.post(
        f"/api/v1/jobs/{running_job.slurm_id}/progress/",
        {"step": 1},
        content_type="application/json",
    )
    made_up = post_progress(client, running_job.slurm_id, "mbj_not-a-real-token")

    assert missing.status_code == 401
    assert made_up.status_code == 401


def test_a_malformed_report_is_a_field_error(client, running_job):
    response = post_progress(client, running_job.slurm_id, running_job.raw_token, step=-5)

    assert response.status_code == 400
    assert "step" in response.json()["errors"]


def test_a_job_submitted_while_the_sync_read_slurm_keeps_its_row_and_its_token(
    client, cluster, sim, synced, researcher, submit_as, submissions
):
    from django.utils import timezone

    from sync.cycle import apply_snapshot

    # A sync cycle reads Slurm, then the researcher submits before it writes.
    read_at = timezone.now()
    snapshot = (sim.partitions(), sim.nodes(), sim.jobs())
    slurm_id = submit_as(researcher)
    token = token_in(submissions[-1].script)
    apply_snapshot(cluster, *snapshot, read_at=read_at)

    job = Job.objects.get(slurm_id=slurm_id)
    assert (job.state, job.superseded) == ("PENDING", False)
    synced(timedelta(seconds=1))
    assert Job.objects.get(slurm_id=slurm_id, superseded=False).pk == job.pk
    assert post_progress(client, slurm_id, token).status_code == 201
