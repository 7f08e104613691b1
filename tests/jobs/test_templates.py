from __future__ import annotations

import pytest

from jobs.models import JobTemplate

pytestmark = pytest.mark.django_db


def test_a_researcher_saves_the_form_as_a_named_template(login, researcher, job_form, synced):
    response = login(researcher).post(
        "/jobs/new", {**job_form, "save_template": "1", "template_name": "resnet base"}
    )

    assert response.status_code == 302
    template = JobTemplate.objects.get(owner=researcher, name="resnet base")
    assert template.params["command"] == "train.py --epochs 3"
    page = login(researcher).get("/jobs/templates/").content.decode()
    assert "resnet base" in page


def test_a_template_prefills_the_new_job_form(login, researcher, job_form, synced):
    client = login(researcher)
    client.post("/jobs/new", {**job_form, "save_template": "1", "template_name": "base"})
    template = JobTemplate.objects.get(name="base")

    form = client.get(f"/jobs/new?template={template.pk}").context["form"]

    assert form.initial["command"] == "train.py --epochs 3"
    assert form.initial["workdir"] == "/home/alice/resnet"


def test_saving_an_invalid_form_as_a_template_shows_the_errors(login, researcher, job_form, synced):
    response = login(researcher).post(
        "/jobs/new", {**job_form, "nodes": "x", "save_template": "1", "template_name": "bad"}
    )

    assert response.status_code == 400
    assert not JobTemplate.objects.exists()


def test_researchers_delete_only_their_own_templates(
    login, researcher, other_researcher, job_form, synced
):
    login(researcher).post("/jobs/new", {**job_form, "save_template": "1", "template_name": "t"})
    template = JobTemplate.objects.get()

    login(other_researcher).post(f"/jobs/templates/{template.pk}/delete")
    assert JobTemplate.objects.filter(pk=template.pk).exists()
    assert login(other_researcher).get(f"/jobs/new?template={template.pk}").status_code == 404

    login(researcher).post(f"/jobs/templates/{template.pk}/delete")
    assert not JobTemplate.objects.exists()


def test_the_resubmit_form_is_prefilled_and_editable(login, researcher, submit_as, submissions):
    slurm_id = submit_as(researcher, command="train.py --epochs 9")
    client = login(researcher)

    form = client.get(f"/jobs/{slurm_id}/resubmit").context["form"]
    data = {name: value for name, value in form.initial.items()}
    data.update(nodes=2, auto_resume="no")
    response = client.post(f"/jobs/{slurm_id}/resubmit", data)

    assert form.initial["command"] == "train.py --epochs 9"
    assert response.status_code == 302
    assert "#SBATCH --nodes=2" in submissions[-1].script
    assert submissions[-1].user == "alice"
