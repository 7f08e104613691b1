"""The owner of a job Slurm restarted hears once when it finally ends."""

from __future__ import annotations

from datetime import timedelta

from django.core import mail

from clusters.backends.base import JobSubmission

SCRIPT = "#!/bin/bash\n#SBATCH --partition=train\n#SBATCH --gres=gpu:8\nsrun train\n"


def test_a_restarted_job_that_ends_tells_its_owner_once(
    sim, synced, researcher, django_capture_on_commit_callbacks
):
    researcher.email = "alice@example.org"
    researcher.save()
    job_id = sim.submit_job(JobSubmission(script=SCRIPT, user="alice"))
    synced(timedelta(seconds=1))
    sim.requeue_job(job_id)
    synced(timedelta(minutes=3))  # started again after the requeue
    assert sim.job(job_id).restart_count == 1 and sim.job(job_id).state == "RUNNING"
    assert mail.outbox == []

    with django_capture_on_commit_callbacks(execute=True):
        synced(sim.job(job_id).duration + timedelta(minutes=1))  # it runs to the end
        synced(timedelta(minutes=1))  # a later cycle says nothing again
    [message] = mail.outbox
    assert f"Job {job_id}" in message.subject and "finished after a restart" in message.subject
    assert "after being restarted once" in message.body


def test_a_job_that_never_restarted_ends_without_a_message(
    sim, synced, researcher, django_capture_on_commit_callbacks
):
    researcher.email = "alice@example.org"
    researcher.save()
    job_id = sim.submit_job(JobSubmission(script=SCRIPT, user="alice"))
    synced(timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        synced(sim.job(job_id).duration + timedelta(minutes=1))
    assert mail.outbox == []
