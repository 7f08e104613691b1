"""Who may do what with a job, through the HTTP API and the pages."""

from __future__ import annotations

import pytest

from jobs.models import Job

pytestmark = pytest.mark.django_db


@pytest.fixture
def alices_job(researcher, other_researcher, admin_user, manager, submit_as):
    return submit_as(researcher)


def test_researchers_and_admins_may_submit_but_managers_may_not(
    login, researcher, admin_user, manager, job_form, synced, submissions
):
    statuses = {
        user.username: login(user)
        .post("/api/v1/jobs/", job_form, content_type="application/json")
        .status_code
        for user in (researcher, admin_user, manager)
    }

    assert statuses == {"alice": 201, "admin": 201, "manager": 403}
    assert [s.user for s in submissions] == ["alice", "admin"]


@pytest.mark.parametrize(
    ("who", "status", "sees_script"),
    [("alice", 200, True), ("bob", 404, None), ("admin", 200, True), ("manager", 200, False)],
)
def test_viewing_a_job_and_its_script(
    login, alices_job, researcher, other_researcher, admin_user, manager, who, status, sees_script
):
    user = {"alice": researcher, "bob": other_researcher, "admin": admin_user, "manager": manager}
    client = login(user[who])

    api = client.get(f"/api/v1/jobs/{alices_job}/")
    page = client.get(f"/jobs/{alices_job}/", follow=True)

    assert api.status_code == status
    assert page.status_code == status
    if sees_script is not None:
        assert (api.json()["script"] is not None) == sees_script
        assert ('id="job-script"' in page.content.decode()) == sees_script


@pytest.mark.parametrize(("who", "status"), [("bob", 404), ("manager", 403), ("alice", 200)])
def test_only_the_owner_or_an_admin_may_cancel(
    login, alices_job, researcher, other_researcher, manager, who, status, sim
):
    user = {"alice": researcher, "bob": other_researcher, "manager": manager}[who]

    response = login(user).post(f"/api/v1/jobs/{alices_job}/cancel/")

    assert response.status_code == status
    cancelled = sim.job(alices_job).state == "CANCELLED"
    assert cancelled == (status == 200)


def test_an_admin_cancels_a_researchers_job_and_the_history_says_who(
    login, alices_job, admin_user, sim
):
    response = login(admin_user).post(f"/api/v1/jobs/{alices_job}/cancel/")

    assert response.status_code == 200
    assert response.json()["state"] == "CANCELLED"
    assert sim.job(alices_job).state == "CANCELLED"
    last = Job.objects.get(slurm_id=alices_job).state_changes.first()
    assert (last.to_state, last.actor) == ("CANCELLED", "admin")


def test_cancelling_a_finished_job_is_a_conflict(login, alices_job, researcher):
    client = login(researcher)
    client.post(f"/api/v1/jobs/{alices_job}/cancel/")

    response = client.post(f"/api/v1/jobs/{alices_job}/cancel/")

    assert response.status_code == 409


def test_the_cancel_page_button_refuses_other_researchers(login, alices_job, other_researcher, sim):
    response = login(other_researcher).post(f"/jobs/{alices_job}/cancel")

    assert response.status_code == 404
    assert sim.job(alices_job).state != "CANCELLED"


@pytest.mark.parametrize(("who", "status"), [("bob", 404), ("manager", 403), ("alice", 201)])
def test_only_the_owner_or_an_admin_may_resubmit(
    login, alices_job, researcher, other_researcher, manager, who, status, submissions
):
    user = {"alice": researcher, "bob": other_researcher, "manager": manager}[who]

    response = login(user).post(
        f"/api/v1/jobs/{alices_job}/resubmit/", {"nodes": 2}, content_type="application/json"
    )

    assert response.status_code == status
    assert len(submissions) == (2 if status == 201 else 1)


def test_an_admin_resubmission_runs_as_the_jobs_owner_not_the_admin(
    login, alices_job, admin_user, submissions
):
    response = login(admin_user).post(
        f"/api/v1/jobs/{alices_job}/resubmit/", {}, content_type="application/json"
    )

    assert response.status_code == 201
    assert submissions[-1].user == "alice"
    assert response.json()["submitted_by"] == "admin"


def test_researchers_list_only_their_own_jobs_and_managers_list_all(
    login, researcher, other_researcher, manager, submit_as
):
    mine = submit_as(researcher)
    theirs = submit_as(other_researcher)

    def listed(user):
        return {job["id"] for job in login(user).get("/api/v1/jobs/").json()["results"]}

    assert listed(researcher) == {mine}
    assert listed(other_researcher) == {theirs}
    assert listed(manager) == {mine, theirs}


def test_an_unknown_job_is_a_404_in_the_api_error_shape(login, researcher, synced):
    response = login(researcher).get("/api/v1/jobs/999999/")

    assert response.status_code == 404
    assert set(response.json()) == {"detail", "errors"}
