"""A job's output and error panels and its plain-text view, through HTTP."""

from __future__ import annotations

from datetime import timedelta

import pytest

from clusters.backends.base import FileTail, JobFileError

pytestmark = pytest.mark.django_db


@pytest.fixture
def alices_job(researcher, other_researcher, admin_user, manager, submit_as, synced):
    job_id = submit_as(researcher)
    synced(advance=timedelta(hours=1))
    return job_id


def test_the_owner_sees_the_end_of_the_jobs_output(login, researcher, alices_job):
    response = login(researcher).get(f"/jobs/{alices_job}/output/?stream=stdout")

    body = response.content.decode()
    assert response.status_code == 200
    assert f"/home/alice/resnet/resnet-{alices_job}.out" in body
    assert f"job {alices_job} (resnet)" in body


def test_an_active_jobs_panel_follows_the_file_and_a_finished_one_loads_once(
    login, researcher, alices_job, sim, synced
):
    client = login(researcher)
    following = client.get(f"/jobs/{alices_job}/output/?stream=stdout").content.decode()
    sim.cancel_job(alices_job)
    synced()
    finished = client.get(f"/jobs/{alices_job}/output/?stream=stdout").content.decode()

    assert 'hx-trigger="every 3s"' in following
    assert "hx-trigger" not in finished


def test_errors_in_the_same_file_as_the_output_say_so_and_the_file_is_shown_once(
    login, researcher, alices_job
):
    client = login(researcher)
    errors = client.get(f"/jobs/{alices_job}/output/?stream=stderr").content.decode()
    output = client.get(f"/jobs/{alices_job}/output/?stream=stdout").content.decode()
    raw_errors = client.get(f"/jobs/{alices_job}/output/raw?stream=stderr").content.decode()

    path = f"/home/alice/resnet/resnet-{alices_job}.out"
    assert "Errors go to the same file as the output, shown above" in errors
    assert path not in errors and f"job {alices_job} (resnet)" not in errors
    assert "<h3>Output and errors" in output and path in output
    assert f"job {alices_job} (resnet)" in raw_errors


def test_an_admin_may_read_a_researchers_output(login, admin_user, alices_job):
    assert login(admin_user).get(f"/jobs/{alices_job}/output/?stream=stdout").status_code == 200


def test_another_researcher_is_told_there_is_no_such_job(login, other_researcher, alices_job):
    client = login(other_researcher)

    assert client.get(f"/jobs/{alices_job}/output/?stream=stdout").status_code == 404
    assert client.get(f"/jobs/{alices_job}/output/raw?stream=stdout").status_code == 404


def test_a_manager_is_told_the_output_is_private(login, manager, alices_job):
    client = login(manager)
    page = client.get(f"/jobs/{alices_job}/", follow=True).content.decode()
    panel = client.get(f"/jobs/{alices_job}/output/?stream=stdout")

    assert "output is private" in page
    assert "/output/?stream=" not in page
    assert panel.status_code == 403
    assert "output is private" in panel.content.decode()
    assert "loss" not in panel.content.decode()


def test_the_owners_job_page_loads_both_panels_with_links_that_work_without_javascript(
    login, researcher, alices_job
):
    page = login(researcher).get(f"/jobs/{alices_job}/", follow=True).content.decode()

    assert f'hx-get="/jobs/test/{alices_job}/output/?stream=stdout" hx-trigger="load"' in page
    assert f'hx-get="/jobs/test/{alices_job}/output/?stream=stderr" hx-trigger="load"' in page
    assert f'href="/jobs/test/{alices_job}/output/raw?stream=stdout"' in page


def test_the_plain_text_view_is_text_plain_and_never_sniffed(login, researcher, alices_job):
    client = login(researcher)
    inline = client.get(f"/jobs/{alices_job}/output/raw?stream=stdout")
    download = client.get(f"/jobs/{alices_job}/output/raw?stream=stdout&download=1")

    assert inline.status_code == 200
    assert inline["Content-Type"] == "text/plain; charset=utf-8"
    assert inline["X-Content-Type-Options"] == "nosniff"
    assert inline["Content-Disposition"].startswith("inline;")
    assert download["Content-Disposition"] == f'attachment; filename="job-{alices_job}.out.txt"'
    assert f"job {alices_job} (resnet)" in inline.content.decode()


@pytest.mark.parametrize(
    "query",
    [
        "?stream=",
        "?stream=../../etc/passwd",
        "?stream=stdout%00",
        "?stream=%00",
        "?stream=STDOUT",
    ],
)
def test_hostile_stream_values_are_a_400(login, researcher, alices_job, query):
    client = login(researcher)

    assert client.get(f"/jobs/{alices_job}/output/{query}").status_code == 400
    assert client.get(f"/jobs/{alices_job}/output/raw{query}").status_code == 400


@pytest.mark.parametrize(
    ("path", "status"),
    # A NUL anywhere in a path is refused as bad input before routing (core/inputs.py).
    [("/jobs/%00/output/", 400), ("/jobs/1%00/output/", 400), ("/jobs/-1/output/", 404)],
)
def test_hostile_job_ids_are_refused(login, researcher, alices_job, path, status):
    assert login(researcher).get(path + "?stream=stdout").status_code == status


def test_a_job_that_has_not_started_says_its_file_does_not_exist_yet(
    login, researcher, submit_as, sim
):
    job_id = submit_as(researcher)
    client = login(researcher)

    panel = client.get(f"/jobs/{job_id}/output/?stream=stdout")
    raw = client.get(f"/jobs/{job_id}/output/raw?stream=stdout")

    assert panel.status_code == 200
    assert "does not exist (yet)" in panel.content.decode()
    assert raw.status_code == 200
    assert "Content-Disposition" not in raw
    assert "does not exist (yet)" in raw.content.decode()


def test_permission_denied_is_shown_in_words_not_a_500(
    login, researcher, alices_job, sim, monkeypatch
):
    def denied(user, path, max_bytes):
        raise JobFileError(JobFileError.DENIED, f"{user} may not read {path} (permission denied).")

    monkeypatch.setattr(sim, "read_job_file", denied)
    client = login(researcher)

    panel = client.get(f"/jobs/{alices_job}/output/?stream=stdout")
    raw = client.get(f"/jobs/{alices_job}/output/raw?stream=stdout")

    assert panel.status_code == 200
    assert "(permission denied)" in panel.content.decode()
    assert raw.content.decode().startswith(f"Output of job {alices_job}: alice may not read")


def test_a_job_slurm_forgot_falls_back_to_what_medbay_submitted(
    login, researcher, alices_job, sim, monkeypatch
):
    def forgotten(job_id):
        from clusters.backends.base import BackendError

        raise BackendError("Invalid job id specified", permanent=True)

    reads = []
    monkeypatch.setattr(sim, "job_output_paths", forgotten)
    monkeypatch.setattr(
        sim, "read_job_file", lambda user, path, n: reads.append((user, path)) or FileTail(path, "")
    )

    body = login(researcher).get(f"/jobs/{alices_job}/output/?stream=stdout").content.decode()

    assert reads == [("alice", f"/home/alice/resnet/resnet-{alices_job}.out")]
    assert "The file is empty." in body


def test_a_reused_job_id_belonging_to_someone_else_is_not_read(
    login, researcher, alices_job, sim, monkeypatch
):
    from clusters.backends.base import JobOutputPaths

    monkeypatch.setattr(
        sim, "job_output_paths", lambda job_id: JobOutputPaths("/home/bob/o", "/home/bob/o", "bob")
    )

    body = login(researcher).get(f"/jobs/{alices_job}/output/?stream=stdout").content.decode()

    assert "now belongs to bob" in body
