# ruff: noqa: F811  (the jobs suite's fixtures, imported below, are arguments here)
"""Set-up lines and job tokens: shown to the job's owner only, the token never stored."""

from __future__ import annotations

import pytest

from jobs.models import Job
from tests.jobs.conftest import (  # noqa: F401 (fixtures)
    job_form,
    login,
    submissions,
    submit_as,
    token_in,
)

pytestmark = pytest.mark.django_db

SECRET = "export SECRET_API_KEY=sk-live-123"


@pytest.fixture
def secret_job(researcher, other_researcher, manager, admin_user, submit_as):
    return submit_as(researcher, env_setup=SECRET)


def test_the_raw_job_token_is_not_stored_in_the_job_row(secret_job, submissions):
    raw = token_in(submissions[-1].script)
    job = Job.objects.get(slurm_id=secret_job)

    assert raw not in job.script
    assert raw not in str(job.params)
    assert "export MEDBAY_JOB_TOKEN='<hidden>'" in job.script


def test_the_owner_sees_the_set_up_lines(login, researcher, secret_job):
    client = login(researcher)

    api = client.get(f"/api/v1/jobs/{secret_job}/").json()
    page = client.get(f"/jobs/{secret_job}/", follow=True).content.decode()

    assert api["params"]["env_setup"] == [SECRET]
    assert SECRET in api["script"]
    assert "sk-live-123" in page


@pytest.mark.parametrize("who", ["manager", "admin"])
def test_others_who_may_see_the_job_see_that_set_up_lines_exist_but_not_what_they_say(
    login, manager, admin_user, secret_job, who
):
    client = login({"manager": manager, "admin": admin_user}[who])

    api = client.get(f"/api/v1/jobs/{secret_job}/")
    page = client.get(f"/jobs/{secret_job}/", follow=True)

    assert api.status_code == page.status_code == 200
    assert "sk-live-123" not in api.content.decode()
    assert "sk-live-123" not in page.content.decode()
    assert api.json()["params"]["env_setup"] == ["<hidden>"]


def test_an_admin_sees_the_script_with_its_set_up_lines_hidden(login, admin_user, secret_job):
    script = login(admin_user).get(f"/api/v1/jobs/{secret_job}/").json()["script"]

    assert "#SBATCH" in script
    assert "# <hidden> set-up line" in script
    assert "SECRET_API_KEY" not in script


def test_an_admins_resubmit_form_hides_the_owners_set_up_lines_and_keeps_them(
    login, admin_user, secret_job, submissions
):
    """Seen: the resubmit form pre-filled an admin's page with the owner's set-up lines."""
    admin = login(admin_user)

    form = admin.get(f"/jobs/{secret_job}/resubmit").content.decode()
    assert "sk-live-123" not in form
    assert "set-up lines are kept" in form
    page = admin.post(f"/jobs/{secret_job}/resubmit", {**_form_of(secret_job), "env_setup": ""})

    assert page.status_code == 302, page.content.decode()[-2000:]
    assert SECRET in submissions[-1].script  # kept for the job, never shown to the admin


def _form_of(slurm_id: int) -> dict:
    from jobs.forms import initial_from_params

    data = initial_from_params(Job.objects.get(slurm_id=slurm_id).params)
    return {key: value for key, value in data.items() if value is not None}
