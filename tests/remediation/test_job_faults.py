"""A job's own fault is the job's: the same application XID on several of its nodes
within a short window is one incident for the job, and no node is acted on."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from clusters.backends.base import JobSubmission
from health.models import FaultGroup, Incident
from jobs.models import Job
from jobs.timeline import build_timeline
from remediation import admission, safety
from remediation.models import Remediation
from sync.cycle import apply_snapshot
from tests.remediation.conftest import ingest_xid

FOUR_NODES = (
    "#!/bin/bash\n#SBATCH --partition=train\n#SBATCH --nodes=4\n#SBATCH --gres=gpu:8\nsrun train\n"
)


@pytest.fixture
def four_node_job(big_sim, cluster, researcher):
    researcher.email = "alice@example.org"
    researcher.save()
    job_id = big_sim.submit_job(JobSubmission(script=FOUR_NODES, user="alice"))
    big_sim.advance(timedelta(seconds=1))
    apply_snapshot(cluster, big_sim.partitions(), big_sim.nodes(), big_sim.jobs())
    job = Job.objects.get(slurm_id=job_id)
    assert len(job.node_names) == 4
    return job


def every_gpu_reports(nodes, xid: int) -> list[int]:
    """Each node's agent reports the XID on all 8 GPUs, as a kernel crash on every rank."""
    incidents = []
    for name in nodes:
        for gpu in range(8):
            incidents += ingest_xid(name, xid, gpu=gpu).incident_ids
    return incidents


def test_xid_13_on_every_node_of_a_four_node_job_is_one_fault_of_the_job(
    four_node_job, settings, django_capture_on_commit_callbacks
):
    settings.MEDBAY_JOB_FAULT_WINDOW_S = 30
    with django_capture_on_commit_callbacks(execute=True):
        incidents = every_gpu_reports(four_node_job.node_names, 13)

    assert not Remediation.objects.exists()  # no node drained, reset, or asked about
    group = FaultGroup.objects.get()
    assert group.slurm_job_id == four_node_job.slurm_id
    assert set(Incident.objects.filter(pk__in=incidents).values_list("group", flat=True)) == {
        group.pk
    }
    assert group.summary == (
        "XID 13 on 32 GPUs of 4 nodes within 1 s: an error in the application, not in the hardware"
    )
    assert "two or more nodes of job" in group.rule and group.window_s == 30
    assert not Incident.objects.filter(decision_due=True).exists()
    # None of the nodes counts it toward flapping (nor the breaker: no run was made).
    assert safety.fault_counts(Incident.objects.values_list("node_id", flat=True)) == {}
    [message] = mail.outbox  # the owner hears once, not once per node
    assert "hit a fault of its own" in message.subject
    assert "an error in the application" in message.body
    story = build_timeline(four_node_job).summary
    assert "an error in the application, not in the hardware" in story


def test_a_lone_nodes_application_fault_on_a_multi_node_job_is_decided_after_the_window(
    four_node_job, settings
):
    settings.MEDBAY_JOB_FAULT_WINDOW_S = 30
    [incident] = ingest_xid(four_node_job.node_names[0], 13, gpu=2).incident_ids
    assert not Remediation.objects.exists()  # held while the other nodes may report
    assert Incident.objects.get(pk=incident).decision_due
    Incident.objects.filter(pk=incident).update(
        opened_at=timezone.now() - timedelta(seconds=31),
        decide_after=timezone.now(),
    )
    admission.decide_due()
    run = Remediation.objects.get()  # as today: restart the jobs, for an admin's approval
    assert run.incident_id == incident and run.action == "restart_app"
    assert not FaultGroup.objects.exists()


def test_a_hardware_xid_on_every_node_of_a_job_is_still_each_nodes_own(
    four_node_job, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        for name in four_node_job.node_names[:2]:
            ingest_xid(name, 79, gpu=5)
    assert Remediation.objects.filter(action="replace").count() == 2
    assert not FaultGroup.objects.exists()


def test_the_feed_shows_a_jobs_own_fault_as_one_row_with_each_nodes_events_inside(
    four_node_job, settings, client, admin_user, django_capture_on_commit_callbacks
):
    settings.MEDBAY_JOB_FAULT_WINDOW_S = 30
    with django_capture_on_commit_callbacks(execute=True):
        every_gpu_reports(four_node_job.node_names, 13)
    ingest_xid("gpu-20", 48, gpu=0)  # an unrelated event keeps its own row
    group = FaultGroup.objects.get()

    client.force_login(admin_user)
    feed = client.get("/health/events/").content.decode()
    assert feed.count(f'id="fault-group-{group.pk}"') == 1
    assert "Fault of job" in feed and "32 events on gpu-01, gpu-02, gpu-03, gpu-04" in feed
    assert "an error in the application, not in the hardware" in feed
    assert feed.count('<tr id="event-') == 1  # only gpu-20's


def test_an_admin_splits_a_jobs_fault_and_each_node_is_decided_on_its_own(
    four_node_job, settings, client, admin_user, django_capture_on_commit_callbacks
):
    settings.MEDBAY_JOB_FAULT_WINDOW_S = 30
    with django_capture_on_commit_callbacks(execute=True):
        for name in four_node_job.node_names[:2]:
            ingest_xid(name, 13, gpu=0)
    group = FaultGroup.objects.get()
    client.force_login(admin_user)
    page = client.get(f"/faults/{group.pk}/").content.decode()
    assert "no node was taken out of service for the job" in page

    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post(f"/faults/{group.pk}/split/", follow=True)
    assert "Split: 2 incidents decided node by node." in answer.content.decode()
    # Each node's own restart_app again, for an admin's approval, and it counts again.
    assert Remediation.objects.filter(action="restart_app").count() == 2
    group.refresh_from_db()
    assert group.split_by == "admin"
    feed = client.get("/health/events/").content.decode()
    assert f"fault-group-{group.pk}" not in feed


def test_a_hardware_xid_on_a_gpu_of_a_grouped_job_fault_is_decided_for_its_node(
    four_node_job, settings, django_capture_on_commit_callbacks
):
    settings.MEDBAY_JOB_FAULT_WINDOW_S = 30
    with django_capture_on_commit_callbacks(execute=True):
        every_gpu_reports(four_node_job.node_names[:2], 13)
        [grown] = ingest_xid(four_node_job.node_names[0], 79, gpu=0).incident_ids
    incident = Incident.objects.get(pk=grown)
    assert sorted(incident.xids) == [13, 79] and incident.group_id is None
    run = Remediation.objects.get()
    assert (run.incident_id, run.action) == (grown, "replace")
    assert FaultGroup.objects.get().incidents.count() == 15
