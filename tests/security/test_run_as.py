# ruff: noqa: F811  (the jobs suite's fixtures, imported below, are arguments here)
"""Jobs run only as a researcher's own Unix account: never root or a system account."""

from __future__ import annotations

import pwd

import pytest
from django.utils import timezone

from jobs.models import Job, ResearcherProfile
from tests.jobs.conftest import job_form, login, submissions  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db


@pytest.fixture
def owned_by(cluster, synced):
    def job(unix_user: str, slurm_id: int = 9001) -> Job:
        return Job.objects.create(
            cluster=cluster,
            slurm_id=slurm_id,
            name="imported",
            user=unix_user,
            partition="train",
            state="COMPLETED",
            node_count=1,
            gpus=8,
            submit_at=timezone.now(),
        )

    return job


def _resubmit(login, admin_user, job, body=None):
    return login(admin_user).post(
        f"/api/v1/jobs/{job.slurm_id}/resubmit/", body or {}, content_type="application/json"
    )


def test_an_admin_resubmitting_roots_job_is_refused_with_a_clear_message(
    login, admin_user, owned_by, submissions
):
    response = _resubmit(login, admin_user, owned_by("root"))

    assert response.status_code == 400
    assert "never submits jobs as 'root'" in response.json()["detail"]
    assert submissions == []


def test_an_admin_resubmitting_a_system_accounts_job_is_refused(
    login, admin_user, owned_by, submissions
):
    system = pwd.getpwuid(1).pw_name  # daemon on Debian
    ResearcherProfile.objects.create(user=admin_user, unix_user=system)

    response = _resubmit(login, admin_user, owned_by(system))

    assert response.status_code == 400
    assert "system account" in response.json()["detail"]
    assert submissions == []


def test_the_minimum_uid_is_a_setting(login, admin_user, owned_by, submissions, settings, job_form):
    system = pwd.getpwuid(1).pw_name
    ResearcherProfile.objects.create(user=admin_user, unix_user=system)
    settings.MEDBAY_MIN_UID = 1

    response = _resubmit(login, admin_user, owned_by(system), job_form)

    assert response.status_code == 201
    assert submissions[-1].user == system


def test_a_job_of_an_account_no_medbay_user_has_is_not_resubmitted(
    login, admin_user, owned_by, submissions
):
    response = _resubmit(login, admin_user, owned_by("carol"))

    assert response.status_code == 400
    assert "not the Unix account of any Medbay user" in response.json()["detail"]
    assert submissions == []


def test_a_researcher_mapped_to_root_cannot_submit(
    login, researcher, job_form, synced, submissions
):
    ResearcherProfile.objects.create(user=researcher, unix_user="root")

    response = login(researcher).post("/api/v1/jobs/", job_form, content_type="application/json")

    assert response.status_code == 400
    assert submissions == []


def test_the_resubmit_page_says_why_it_refused(login, admin_user, owned_by, submissions, job_form):
    job = owned_by("root")

    response = login(admin_user).post(f"/jobs/{job.slurm_id}/resubmit", job_form)

    assert response.status_code == 400
    assert "never submits jobs as" in response.content.decode()
    assert submissions == []
