"""The new-job form answers once, with every problem next to its field (#30 item 5)."""

from __future__ import annotations

import pytest

from clusters.backends.base import JobSubmission

pytestmark = pytest.mark.django_db


def test_a_form_with_every_kind_of_problem_reports_them_all_in_one_answer(
    login, researcher, job_form, sim, synced, submissions
):
    sim.add_partition("train", max_nodes=2, max_time_minutes=120, default=True)
    synced()
    broken = {**job_form, "job_name": "", "nodes": 3, "mem": "lots", "workdir": "relative"}

    response = login(researcher).post("/jobs/new", broken)

    errors = response.context["form"].errors
    assert response.status_code == 400
    assert errors["job_name"] == ["This field is required."]
    assert errors["nodes"] == ["train allows at most 2."]
    assert errors["mem"] == ["Use megabytes as a whole number, or a size such as 32G or 500M."]
    assert errors["workdir"][0].startswith("Use an absolute path")
    page = response.content.decode()
    assert 'id="error-job_name"' in page and 'id="error-workdir"' in page
    assert submissions == []


def test_an_empty_checkpoint_dir_is_not_blamed_for_a_relative_working_directory(
    login, researcher, job_form, synced
):
    multi_node = {**job_form, "nodes": 2, "workdir": "runs/resnet", "checkpoint_dir": ""}

    errors = login(researcher).post("/jobs/new", multi_node).context["form"].errors

    assert "workdir" in errors
    assert "checkpoint_dir" not in errors


def test_asking_for_auto_resume_without_a_checkpoint_dir_is_still_an_error(
    login, researcher, job_form, synced
):
    response = login(researcher).post("/jobs/new", {**job_form, "auto_resume": "yes"})

    assert response.context["form"].errors["checkpoint_dir"] == [
        "Auto-resume needs a checkpoint directory."
    ]


def test_the_preview_names_fields_by_their_labels(login, researcher, job_form, synced):
    response = login(researcher).post("/jobs/new/preview", {**job_form, "gpus_per_node": 9})

    page = response.content.decode()
    assert "GPUs per node: Nodes in train have at most 8 GPUs." in page
    assert "gpus_per_node" not in page


def test_gpus_per_node_starts_at_one_on_a_gpu_partition(login, researcher, synced):
    page = login(researcher).get("/jobs/new").content.decode()

    assert 'name="gpus_per_node" value="1"' in page
    assert "Fill in Job name, Working directory, Command or script body to see the script." in page


def test_a_prefilled_resubmit_previews_its_script_at_once(login, researcher, submit_as):
    slurm_id = submit_as(researcher)

    page = login(researcher).get(f"/jobs/{slurm_id}/resubmit").content.decode()

    assert 'id="script-preview"' in page
    assert "Fill in the form" not in page
    assert 'id="form-notice"' not in page


def test_resubmitting_a_job_from_outside_medbay_says_why_command_and_directory_are_blank(
    login, admin_user, sim, synced
):
    script = "#!/bin/bash\n#SBATCH --job-name=outside\n#SBATCH --partition=train\nsrun x\n"
    slurm_id = sim.submit_job(JobSubmission(script=script, user="alice"))
    synced()

    page = login(admin_user).get(f"/jobs/{slurm_id}/resubmit").content.decode()

    assert f"Job {slurm_id} was submitted outside Medbay" in page
    assert "Slurm does not report a job&#x27;s command or working directory" in page
    assert "Fill in Working directory, Command or script body to see the script." in page
    assert "Fill in the form" not in page
