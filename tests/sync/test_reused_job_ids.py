"""Slurm reuses job ids; a new job never overwrites the record of an older one."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from clusters.backends.base import JobInfo
from jobs.models import Job
from sync.cycle import apply_snapshot

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)
OLD = JobInfo(
    job_id=1000, name="bobs-old-run", user="bob", partition="train", state="COMPLETED",
    submit_time=T0, start_time=T0, end_time=T0 + timedelta(hours=1), restart_count=0,
)  # fmt: skip


def test_a_live_job_with_the_id_of_a_finished_one_gets_a_row_of_its_own(cluster):
    apply_snapshot(cluster, [], [], [OLD])
    old = Job.objects.get(slurm_id=1000)
    Job.objects.filter(pk=old.pk).update(script="#!/bin/bash\nbob's script\n")
    new = replace(
        OLD, name="alices-new-run", user="alice", state="PENDING",
        submit_time=T0 + timedelta(days=20), start_time=None, end_time=None,
    )  # fmt: skip

    apply_snapshot(cluster, [], [], [new])

    old.refresh_from_db()
    current = Job.objects.get(slurm_id=1000, superseded=False)
    assert (old.superseded, old.user, old.state) == (True, "bob", "COMPLETED")
    assert "bob's script" in old.script
    assert (current.pk != old.pk, current.user, current.script) == (True, "alice", "")
    assert current.state_changes.count() == 1


def test_a_finished_job_requeued_by_scontrol_stays_the_same_job(cluster):
    apply_snapshot(cluster, [], [], [OLD])
    requeued = replace(OLD, state="PENDING", restart_count=1)

    apply_snapshot(cluster, [], [], [requeued])

    assert Job.objects.filter(slurm_id=1000).count() == 1
    assert Job.objects.get(slurm_id=1000).restart_count == 1


def test_the_researchers_page_shows_her_job_not_the_older_one(client, researcher, cluster):
    apply_snapshot(cluster, [], [], [OLD])
    new = replace(OLD, name="alices-new-run", user="alice", state="RUNNING", end_time=None)
    apply_snapshot(cluster, [], [], [new])

    client.force_login(researcher)
    page = client.get("/jobs/1000/", follow=True)  # to its cluster address

    assert page.status_code == 200
    assert "alices-new-run" in page.content.decode()


def test_a_submission_given_a_finished_jobs_id_never_takes_over_its_record(
    cluster, researcher, sim, monkeypatch
):
    """Seen: a new submission Slurm gave id 1000 was written into an older job 1000 of
    another user (script, parameters, submitter)."""
    from jobs import services
    from jobs.sbatch import JobParams

    apply_snapshot(cluster, [], [], [OLD])
    old = Job.objects.get(slurm_id=1000)
    monkeypatch.setattr(sim, "submit_job", lambda submission: 1000)
    params = JobParams(
        job_name="alices-new-run", partition="train", nodes=1, gpus_per_node=1,
        workdir="/home/alice", command="train.py", time_limit=60,
    )  # fmt: skip

    job = services.submit_job(researcher, params, cluster=cluster)

    old.refresh_from_db()
    assert job.pk != old.pk and job.user == "alice" and job.submitted_by == researcher
    assert (old.superseded, old.user, old.script, old.submitted_by) == (True, "bob", "", None)
