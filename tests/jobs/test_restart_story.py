"""The researcher's story on the simulator, written by the real engine, sync and ingest.

An XID 79 on one node of alice's 2-node job goes through the agent's ingest path,
the XID 79 policy replaces the node from a spare, and her job's explanation is
built from what those parts recorded: no hand-made rows.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from clusters.backends.base import JobSubmission
from clusters.models import Node, Partition
from jobs.models import Job, JobProgress
from jobs.timeline import build_timeline
from remediation import services
from remediation.engine import Engine
from remediation.models import Action, Remediation, RemediationJob, Trigger
from tests.remediation.conftest import TRAINING_JOB, drive, ingest_xid

pytestmark = pytest.mark.django_db


@pytest.fixture
def engine(sim):
    return Engine("story-worker", backend=sim, fleet=sim)


@pytest.fixture
def training_job(sim, synced, cluster):
    Partition.objects.filter(cluster=cluster).update(checkpoint_grace_s=0)
    job_id = sim.submit_job(JobSubmission(script=TRAINING_JOB, user="alice"))
    synced(timedelta(seconds=1))
    assert sim.job(job_id).nodes == ["gpu-01", "gpu-02"]
    blocker = sim.submit_job(JobSubmission(script=TRAINING_JOB, user="bob"))
    synced(timedelta(seconds=1))
    assert sim.job(blocker).nodes == ["gpu-03", "gpu-04"]  # the spare is the only way back
    job = Job.objects.get(slurm_id=job_id)
    JobProgress.objects.create(
        job=job, step=2479, checkpoint_saved=True, reported_at=timezone.now()
    )
    return job


def test_an_xid_79_is_explained_with_the_gpu_the_node_the_spare_and_the_checkpoint(
    sim, synced, engine, training_job, login, researcher, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        ingest_xid("gpu-02", 79, gpu=3)
    run = Remediation.objects.get(node__name="gpu-02")
    assert run.action == Action.REPLACE
    # No wall-clock wait for the release check: the simulator's Slurm kills nothing.
    Remediation.objects.filter(pk=run.pk).update(context={**run.context, "verify_after_s": 0})
    drive(engine, sim, synced)
    run.refresh_from_db()
    assert run.status == "succeeded", run.message
    synced(timedelta(seconds=1))

    data = login(researcher).get(f"/api/v1/jobs/{training_job.slurm_id}/timeline/").json()

    restart = data["restarts"][0]
    assert (restart["cause"], restart["xid"], restart["gpu"], restart["node"]) == (
        "xid_remediation", 79, 3, "gpu-02",
    )  # fmt: skip
    assert (restart["run"], restart["replacement"]) == (run.pk, "gpu-06")
    assert restart["resumed_from_step"] == 2479
    assert restart["resumed_nodes"] == ["gpu-01", "gpu-06"]
    summary = data["summary"]
    assert "because GPU 3 on gpu-02 reported XID 79 (GPU has fallen off the bus)" in summary
    assert "replaced gpu-02 with spare gpu-06" in summary
    assert "from the checkpoint at step 2,479 on gpu-01 and gpu-06" in summary
    job = Job.objects.get(pk=training_job.pk)
    assert job.restart_count == sim.job(job.slurm_id).restart_count == len(data["restarts"]) == 1


def test_the_engine_records_every_job_it_signalled_requeued_and_released(
    sim, synced, engine, training_job
):
    run = services.create_run(
        Node.objects.get(name="gpu-02"), Action.REPLACE, trigger=Trigger.ADMIN,
        reason="bad GPU", context={"grace_s": 0, "verify_after_s": 0},
    )  # fmt: skip
    drive(engine, sim, synced)

    effects = RemediationJob.objects.filter(remediation=run).order_by("id")
    assert [(e.slurm_job_id, e.effect) for e in effects] == [
        (training_job.slurm_id, "signalled"),
        (training_job.slurm_id, "requeued"),
        (training_job.slurm_id, "released"),
    ]
    assert effects[0].nodes == ["gpu-01", "gpu-02"]


def test_a_job_that_started_after_a_run_on_its_node_gets_none_of_its_rows(
    sim, synced, engine, cluster
):
    reset = services.create_run(
        Node.objects.get(name="gpu-04"), Action.DRAIN, trigger=Trigger.ADMIN, reason="maintenance"
    )
    drive(engine, sim, synced)
    sim.resume_node("gpu-04")
    synced(timedelta(seconds=1))
    for name in ("gpu-01", "gpu-02", "gpu-03"):
        sim.drain_node(name, "test: full")
    job_id = sim.submit_job(JobSubmission(script=TRAINING_JOB.replace("--nodes=2", "--nodes=1"),
                                          user="alice"))  # fmt: skip
    synced(timedelta(seconds=1))
    assert sim.job(job_id).nodes == ["gpu-04"]

    timeline = build_timeline(Job.objects.get(slurm_id=job_id))

    assert reset.pk not in {event.run for event in timeline.events}
