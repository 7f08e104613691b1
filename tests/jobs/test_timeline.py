""" "Why did my job restart?" built from recorded rows, one test per cause."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from clusters.models import Node
from clusters.remediation.models import Remediation, RemediationStep
from health.models import HealthEvent
from jobs.models import Job, JobProgress, JobStateChange

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def at(hh: int, mm: int, ss: int = 0) -> datetime:
    return T0.replace(hour=hh, minute=mm, second=ss)


@pytest.fixture
def job(cluster):
    for name in ("gpu-02", "gpu-03", "gpu-05"):
        Node.objects.create(cluster=cluster, name=name, gpu_count=8)
    job = Job.objects.create(
        cluster=cluster,
        slurm_id=1234,
        name="llm",
        user="alice",
        state="RUNNING",
        node_names=["gpu-03", "gpu-05"],
        node_count=2,
        gpus=16,
        restart_count=1,
        submit_at=at(8, 59),
        start_at=at(10, 7),
    )
    history(job, ("", "PENDING", at(8, 59)), ("PENDING", "RUNNING", at(9, 0)))
    return job


def history(job, *rows, reason=""):
    for from_state, to_state, when in rows:
        JobStateChange.objects.create(
            job=job, from_state=from_state, to_state=to_state, at=when, reason=reason
        )


def requeue_and_resume(job, *, reason="requeued (restart 1)"):
    history(job, ("RUNNING", "PENDING", at(10, 2)), reason=reason)
    history(job, ("PENDING", "RUNNING", at(10, 7)))


def checkpoints(job):
    JobProgress.objects.create(job=job, step=4200, checkpoint_saved=True, reported_at=at(9, 50))
    JobProgress.objects.create(job=job, step=4300, checkpoint_saved=False, reported_at=at(10, 0))


def remediation(job, *, trigger, steps, requested_by=None, action="replace", reason="XID 79"):
    run = Remediation.objects.create(
        node=Node.objects.get(name="gpu-02"),
        action=action,
        trigger=trigger,
        status="succeeded",
        reason=reason,
        context={"job_ids": [job.slurm_id], "replacement": "gpu-05", "grace_s": 120},
        requested_by=requested_by,
        created_at=at(9, 58, 30),
    )
    for index, name in enumerate(steps):
        RemediationStep.objects.create(
            remediation=run, index=index, name=name, outcome="succeeded", started_at=at(10, 0)
        )
    return run


def xid_event(node_name="gpu-02", xid=79, gpu=3, when=None):
    when = when or at(9, 58)
    return HealthEvent.objects.create(
        node=Node.objects.get(name=node_name),
        kind="xid",
        xid=xid,
        gpu_index=gpu,
        severity="critical",
        message="GPU has fallen off the bus.",
        observed_at=when,
        last_observed_at=when,
        fold_key=f"{node_name}-{xid}",
    )


def timeline(login, user, slurm_id=1234):
    response = login(user).get(f"/api/v1/jobs/{slurm_id}/timeline/")
    assert response.status_code == 200
    return response.json()


def test_an_xid_driven_restart_is_explained_with_the_gpu_the_steps_and_the_lost_work(
    login, job, researcher
):
    xid_event()
    checkpoints(job)
    remediation(
        job,
        trigger="health_event",
        steps=["drain", "signal_jobs", "wait_grace", "requeue_jobs", "replace", "release_jobs"],
    )
    requeue_and_resume(job)

    data = timeline(login, researcher)

    assert data["summary"] == (
        "Job 1234 restarted at 10:02 because GPU 3 on gpu-02 reported XID 79"
        " (GPU has fallen off the bus). Medbay drained gpu-02, signalled the job to"
        " checkpoint, gave the job 120 s to checkpoint, requeued it, replaced gpu-02 with"
        " gpu-05, released it to start again and the job resumed at 10:07 from step 4,200."
        " Estimated lost work: 3.2 GPU-hours."
    )
    assert data["restarts"][0]["cause"] == "xid_remediation"
    assert data["restarts"][0]["lost_gpu_hours"] == 3.2


def test_the_events_are_merged_in_time_order(login, job, researcher):
    xid_event()
    checkpoints(job)
    remediation(job, trigger="health_event", steps=["drain", "requeue_jobs"])
    requeue_and_resume(job)

    events = timeline(login, researcher)["events"]

    kinds = [event["kind"] for event in events]
    assert kinds == [
        "state", "state", "checkpoint", "health", "remediation", "step", "step", "state", "state",
    ]  # fmt: skip
    assert [e["at"] for e in events] == sorted(e["at"] for e in events)
    assert events[3]["title"] == "gpu-02: XID 79: GPU has fallen off the bus"


def test_an_admin_action_is_told_apart_from_an_xid(login, job, researcher, admin_user):
    remediation(
        job,
        trigger="admin",
        requested_by=admin_user,
        action="drain",
        reason="firmware update",
        steps=["drain", "requeue_jobs"],
    )
    requeue_and_resume(job)

    data = timeline(login, researcher)

    assert data["restarts"][0]["cause"] == "admin_action"
    assert data["summary"].startswith(
        "Job 1234 restarted at 10:02 because admin admin asked Medbay to drain gpu-02"
        " (firmware update). Medbay drained gpu-02, requeued it and the job resumed at 10:07."
    )


def test_a_preemption_is_explained_as_such(login, job, researcher):
    history(job, ("RUNNING", "PREEMPTED", at(10, 2)), reason="Preempted")
    history(job, ("PREEMPTED", "PENDING", at(10, 2)), reason="requeued (restart 1)")
    history(job, ("PENDING", "RUNNING", at(10, 7)))

    data = timeline(login, researcher)

    assert data["restarts"][0]["cause"] == "preemption"
    assert data["summary"] == (
        "Job 1234 restarted at 10:02 because it was preempted by a higher-priority job."
        " The job resumed at 10:07."
    )


def test_the_jobs_own_failure_is_explained_with_lost_work_since_the_checkpoint(
    login, job, researcher
):
    checkpoints(job)
    history(job, ("RUNNING", "FAILED", at(10, 2)), reason="NonZeroExitCode")
    history(job, ("FAILED", "PENDING", at(10, 2)), reason="requeued (restart 1)")
    history(job, ("PENDING", "RUNNING", at(10, 7)))

    data = timeline(login, researcher)

    assert data["restarts"][0]["cause"] == "job_failure"
    assert "because the job itself failed and Slurm requeued it (RequeueExit)" in data["summary"]
    assert "Estimated lost work: 3.2 GPU-hours." in data["summary"]


def test_a_node_failure_without_a_medbay_run_counts_as_the_jobs_own_failure(login, job, researcher):
    requeue_and_resume(job, reason="NodeDown")

    data = timeline(login, researcher)

    assert data["restarts"][0]["cause"] == "job_failure"
    assert "a node it ran on failed, with no Medbay remediation" in data["summary"]


def test_a_job_that_never_restarted_says_so(login, job, researcher):
    data = timeline(login, researcher)

    assert data["summary"] == "Job 1234 has not restarted; it is running."
    assert data["restarts"] == []


def test_several_restarts_are_counted_and_the_lost_work_added_up(login, job, researcher):
    checkpoints(job)
    requeue_and_resume(job, reason="NodeDown")
    history(job, ("RUNNING", "PENDING", at(10, 30)), reason="NodeDown")
    history(job, ("PENDING", "RUNNING", at(10, 35)))

    summary = timeline(login, researcher)["summary"]

    assert summary.startswith("Job 1234 restarted 2 times. The latest: Job 1234 restarted at 10:30")
    # 16 GPUs: 12 min since the checkpoint, then 23 min since the second attempt began.
    assert summary.endswith("In all about 9.3 GPU-hours were lost.")


def test_the_job_page_shows_the_summary(login, job, researcher):
    requeue_and_resume(job, reason="NodeDown")

    page = login(researcher).get("/jobs/1234/").content.decode()

    assert "Job 1234 restarted at 10:02 because a node it ran on failed" in page


def test_another_researcher_cannot_read_the_timeline(login, job, other_researcher):
    response = login(other_researcher).get("/api/v1/jobs/1234/timeline/")

    assert response.status_code == 403
