"""Job ids link to their job pages wherever they appear; pages show words, never "None"."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from clusters.models import Node
from jobs.templatetags.jobs_tags import link_job_ids
from remediation import services
from remediation.models import Mode, RemediationStep, StepOutcome, Trigger

pytestmark = pytest.mark.django_db

RAW_CODES = ("signal_jobs", "wait_grace", "requeue_jobs", "reset_gpu", "health_event", "dry_run")


def no_none(page: str) -> list[str]:
    """Every place a bare None reaches the page's text: a cell, a value."""
    return re.findall(r".{0,40}(?:>\s*None\s*<|<code>None</code>).{0,40}", page)


@pytest.fixture
def running_job(researcher, admin_user, submit_as, synced):
    job_id = submit_as(researcher)
    synced(advance=timedelta(hours=1))
    return job_id


@pytest.fixture
def run_with_steps(running_job):
    node = Node.objects.get(jobs__slurm_id=running_job)
    run = services.create_run(
        node, "reset_gpu", trigger=Trigger.HEALTH_EVENT, reason="XID 79", mode=Mode.AUTOMATIC
    )
    now = timezone.now()
    for index, (name, message) in enumerate(
        [
            ("drain", "drained"),
            ("signal_jobs", f"sent USR1 to job(s) {running_job}, 99999"),
            ("requeue_jobs", f"requeued {running_job}; already finished 99999"),
        ]
    ):
        RemediationStep.objects.create(
            remediation=run,
            index=index,
            name=name,
            attempt=1,
            outcome=StepOutcome.SUCCEEDED,
            started_at=now,
            finished_at=now,
            message=message,
        )
    return run


def test_the_node_page_links_its_jobs(login, admin_user, running_job):
    node = Node.objects.get(jobs__slurm_id=running_job)

    page = login(admin_user).get(f"/nodes/{node.name}/", follow=True).content.decode()

    assert f'<a href="/jobs/test/{running_job}/">{running_job}</a>' in page
    assert no_none(page) == []


def test_a_runs_steps_link_the_jobs_they_name_and_use_human_labels(
    login, admin_user, run_with_steps, running_job
):
    page = login(admin_user).get(f"/remediation/{run_with_steps.pk}/").content.decode()

    assert f'to job(s) <a href="/jobs/test/{running_job}/">{running_job}</a>, ' in page
    assert f'requeued <a href="/jobs/test/{running_job}/">{running_job}</a>' in page
    assert "Signal jobs" in page and "Reset GPU" in page
    assert [code for code in RAW_CODES if f">{code}<" in page or f"{code} →" in page] == []
    assert no_none(page) == []


def test_a_running_jobs_row_shows_no_none_for_slurms_empty_reason(login, researcher, running_job):
    page = login(researcher).get(f"/jobs/{running_job}/", follow=True).content.decode()
    row = re.search(r'<tr id="job-\d+".*?</tr>', page, re.S)[0]

    assert ">None<" not in row


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("account", None, ("Account", "—")),
        ("checkpoint_dir", "", ("Checkpoint dir", "—")),
        ("auto_resume", False, ("Auto resume", "no")),
        ("gpus_per_node", 8, ("GPUs per node", "8")),
        (
            "env_setup",
            ["source a", "module load b"],
            ("Environment set-up lines", "source a; module load b"),
        ),
        ("signal_grace_s", 120, ("Checkpoint grace (seconds)", "120")),
    ],
)
def test_submitted_parameters_have_labels_and_no_none(key, value, shown):
    from jobs.templatetags.jobs_tags import param_label, param_value

    assert (param_label(key), param_value(value)) == shown


def test_the_output_panel_has_no_literal_none(login, researcher, running_job):
    page = login(researcher).get(f"/jobs/{running_job}/output/?stream=stdout").content.decode()

    assert no_none(page) == []


@pytest.mark.parametrize(
    ("message", "linked"),
    [
        ("sent USR1 to job(s) 12, 13", ["12", "13"]),
        ("job 7 ended as FAILED; resubmit it by hand", ["7"]),
        ("left job(s) 5 to Slurm's own start; 12 released", ["5", "12"]),
        ("drained 3 nodes", []),
        ("XID 79 on gpu-01", []),
    ],
)
def test_step_messages_link_exactly_the_job_ids(message, linked):
    assert re.findall(r'<a href="/jobs/(\d+)/">', link_job_ids(message)) == linked


def test_a_step_message_is_escaped_before_its_ids_are_linked():
    html = link_job_ids("<script>job 5</script>")

    assert html == '&lt;script&gt;job <a href="/jobs/5/">5</a>&lt;/script&gt;'


def test_the_action_page_names_the_action_by_its_label_and_links_affected_jobs(
    login, admin_user, running_job
):
    node = Node.objects.get(jobs__slurm_id=running_job)

    page = login(admin_user).get(f"/nodes/{node.name}/actions/to_inference/").content.decode()

    assert "Start Move to inference</button>" in page
    assert "To_inference" not in page and "Start to_inference" not in page
    assert f'<a href="/jobs/test/{running_job}/">{running_job}</a>' in page
