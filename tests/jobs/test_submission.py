from __future__ import annotations

from datetime import timedelta

import pytest

from jobs.models import Job, JobStateChange, ResearcherProfile
from jobs.sbatch import render_sbatch
from tests.jobs.conftest import token_in

pytestmark = pytest.mark.django_db


def test_a_valid_form_submits_the_rendered_script_as_the_researchers_unix_user(
    login, researcher, job_form, synced, submissions, sim
):
    ResearcherProfile.objects.create(user=researcher, unix_user="asmith")

    response = login(researcher).post("/jobs/new", job_form)

    assert response.status_code == 302
    [submission] = submissions
    assert submission.user == "asmith"
    assert submission.workdir == "/home/alice/resnet"
    assert "#SBATCH --gres=gpu:8" in submission.script
    assert "srun --kill-on-bad-exit=1" in submission.script
    slurm_id = int(response.url.strip("/").split("/")[-1])
    assert sim.job(slurm_id).user == "asmith"


def test_submission_creates_the_job_row_at_once_with_script_params_and_history(
    researcher, submit_as, submissions
):
    slurm_id = submit_as(researcher)

    job = Job.objects.get(slurm_id=slurm_id)
    assert job.user == "alice"
    assert job.state == "PENDING"
    assert job.submitted_by == researcher
    assert job.script == submissions[0].script.replace(
        token_in(submissions[0].script), "'<hidden>'"
    )
    assert job.params["command"] == "train.py --epochs 3"
    assert "progress_token" not in job.params
    change = JobStateChange.objects.get(job=job)
    assert (change.from_state, change.to_state, change.actor) == ("", "PENDING", "alice")


def test_the_sync_fills_in_state_later_without_losing_the_script(researcher, submit_as, synced):
    slurm_id = submit_as(researcher)
    synced(timedelta(seconds=1))

    job = Job.objects.get(slurm_id=slurm_id)
    assert job.state == "RUNNING"
    assert job.script.startswith("#!/bin/bash")


def test_the_script_carries_a_progress_token_and_the_portal_url(
    researcher, submit_as, submissions, settings
):
    submit_as(researcher)

    script = submissions[0].script
    assert f"export MEDBAY_PORTAL_URL={settings.MEDBAY_PORTAL_URL}" in script
    assert "export MEDBAY_JOB_TOKEN=mbj_" in script


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"nodes": 3}, "nodes", "train allows at most 2."),
        ({"time_limit": 121}, "time_limit", "train allows at most 120 minutes."),
        ({"gpus_per_node": 9}, "gpus_per_node", "Nodes in train have at most 8 GPUs."),
        ({"nodes": "two"}, "nodes", "Enter a whole number."),
        ({"mem": "lots"}, "mem", "Use megabytes as a whole number, or a size such as 32G or 500M."),
        ({"workdir": "relative/dir"}, "workdir", "Use an absolute path"),
        ({"job_name": "my job"}, "job_name", "Use 1-64 letters"),
        ({"command": "train.py 'unbalanced"}, "command", "Quotes are not balanced."),
        (
            {"template": "custom", "command": "#SBATCH --nodes=64\nsrun x"},
            "command",
            "#SBATCH directives come from the form",
        ),
        ({"auto_resume": "yes"}, "checkpoint_dir", "Auto-resume needs a checkpoint directory."),
        ({"partition": "nope"}, "partition", "Select a valid choice."),
    ],
)
def test_bad_input_is_a_field_error_on_the_page_and_nothing_reaches_slurm(
    login, researcher, job_form, sim, synced, submissions, changes, field, message
):
    sim.add_partition("train", max_nodes=2, max_time_minutes=120, default=True)
    synced()

    response = login(researcher).post("/jobs/new", {**job_form, **changes})

    assert response.status_code == 400
    assert any(message in error for error in response.context["form"].errors[field])
    assert submissions == []


def test_the_api_refuses_bad_input_with_json_field_errors_and_calls_no_backend(
    login, researcher, job_form, synced, submissions
):
    body = {**job_form, "nodes": 0, "gpus_per_node": 99, "workdir": "x"}

    response = login(researcher).post("/api/v1/jobs/", body, content_type="application/json")

    assert response.status_code == 400
    data = response.json()
    assert data["detail"] == "Invalid input."
    assert set(data["errors"]) >= {"nodes", "gpus_per_node"}
    assert submissions == []


def test_the_api_refuses_a_body_that_is_not_an_object(login, researcher, synced, submissions):
    response = login(researcher).post("/api/v1/jobs/", [1, 2], content_type="application/json")

    assert response.status_code == 400
    assert response.json()["errors"] == {"non_field_errors": ["Send a JSON object."]}


def test_the_live_preview_shows_the_exact_script_that_will_be_submitted(
    login, researcher, job_form, synced
):
    response = login(researcher).post("/jobs/new/preview", job_form, HTTP_HX_REQUEST="true")

    assert response.status_code == 200
    form = response.context["script"]
    assert "#SBATCH --job-name=resnet" in form
    assert "export MEDBAY_JOB_TOKEN=issued-at-submit" in form
    assert "<html" not in response.content.decode()


def test_the_live_preview_lists_errors_instead_of_a_script(login, researcher, job_form, synced):
    response = login(researcher).post("/jobs/new/preview", {**job_form, "nodes": "x"})

    assert "Fix these to see the script" in response.content.decode()
    assert response.context["script"] is None


def test_the_preview_button_works_without_javascript(
    login, researcher, job_form, synced, submissions
):
    response = login(researcher).post("/jobs/new", {**job_form, "preview": "1"})

    assert response.status_code == 200
    assert "#SBATCH --job-name=resnet" in response.content.decode()
    assert submissions == []


def test_the_form_page_lists_partitions_with_their_limits(login, researcher, sim, synced):
    sim.add_partition("train", max_nodes=2, max_time_minutes=120, default=True)
    synced()

    page = login(researcher).get("/jobs/new").content.decode()

    assert "train (4 nodes, up to 8 GPUs/node, max 2 nodes/job, max 120 min)" in page
    assert 'hx-trigger="input changed delay:300ms"' in page


def test_auto_resume_is_on_by_default_for_multi_node_gpu_jobs(researcher, submit_as, submissions):
    submit_as(researcher, nodes=2)
    submit_as(researcher, nodes=1)

    multi, single = (s.script for s in submissions)
    assert "#SBATCH --requeue" in multi
    assert "export MEDBAY_CHECKPOINT_DIR=/home/alice/resnet/checkpoints" in multi
    assert "medbay-launch -- python train.py --epochs 3" in multi
    assert "#SBATCH --requeue" not in single


def test_a_slurm_refusal_is_shown_as_an_error_not_a_crash(
    login, researcher, job_form, synced, sim, monkeypatch
):
    from clusters.backends.base import BackendError

    def refuse(submission):
        raise BackendError("Invalid account or account/partition combination", permanent=True)

    monkeypatch.setattr(sim, "submit_job", refuse)

    page = login(researcher).post("/jobs/new", job_form)
    api = login(researcher).post("/api/v1/jobs/", job_form, content_type="application/json")

    assert page.status_code == 400
    assert "Invalid account" in page.content.decode()
    assert api.status_code == 400
    assert "Invalid account" in api.json()["detail"]
    assert not Job.objects.exists()


def test_the_rendered_script_matches_what_render_sbatch_makes_of_the_stored_params(
    researcher, submit_as, submissions, settings
):
    from jobs.sbatch import JobParams

    slurm_id = submit_as(researcher)
    job = Job.objects.get(slurm_id=slurm_id)
    token = submissions[0].script.split("MEDBAY_JOB_TOKEN=")[1].split()[0]
    params = {**job.params, "env_setup": tuple(job.params["env_setup"])}

    again = render_sbatch(
        JobParams(**params, portal_url=settings.MEDBAY_PORTAL_URL, progress_token=token)
    )

    assert again == submissions[0].script
