from datetime import timedelta

from clusters.backends.base import BackendError, JobSubmission
from clusters.models import Cluster, Node, NodeStateChange, NodeStatus
from jobs.models import Job, JobStateChange
from sync.cycle import sync_once

JOB = "#!/bin/bash\n#SBATCH --partition=train\n#SBATCH --nodes=2\n#SBATCH --gres=gpu:8\nsrun x\n"


def test_the_first_sync_creates_nodes_gpus_pools_and_history(synced):
    assert Node.objects.count() == 7
    gpu_01 = Node.objects.get(name="gpu-01")
    assert gpu_01.gpus.count() == 8
    assert gpu_01.pool.kind == "training"
    assert Node.objects.get(name="gpu-06").status == NodeStatus.SPARE
    assert Node.objects.get(name="gpu-05").status == NodeStatus.INFERENCE
    assert NodeStateChange.objects.filter(from_status="").count() == 7


def test_a_sync_without_changes_writes_no_history(synced):
    before = (NodeStateChange.objects.count(), JobStateChange.objects.count())
    result = synced()
    assert result.nodes_changed == [] and result.jobs_changed == []
    assert (NodeStateChange.objects.count(), JobStateChange.objects.count()) == before


def test_a_drain_is_recorded_once_with_its_reason(sim, synced):
    sim.drain_node("gpu-02", "medbay: XID 79 GPU 3 fallen off the bus [run 42]")
    synced()
    synced()
    node = Node.objects.get(name="gpu-02")
    assert node.status == NodeStatus.DRAINED
    assert node.reason.startswith("medbay: XID 79")
    changes = NodeStateChange.objects.filter(node=node, to_status=NodeStatus.DRAINED)
    assert changes.count() == 1
    assert changes.get().reason == node.reason


def test_a_requeue_is_detected_as_a_restart_with_history(sim, synced):
    job_id = sim.submit_job(JobSubmission(script=JOB, user="alice"))
    synced(timedelta(seconds=1))
    job = Job.objects.get(slurm_id=job_id)
    assert job.state == "RUNNING" and job.nodes.count() == 2
    sim.requeue_job(job_id)
    result = synced(timedelta(seconds=1))
    job.refresh_from_db()
    assert result.restarts == [job_id]
    assert (job.state, job.restart_count) == ("PENDING", 1)
    assert job.nodes.count() == 0
    requeue = JobStateChange.objects.get(job=job, to_state="PENDING", from_state="RUNNING")
    assert requeue.reason == "requeued (restart 1)"


def test_a_requeue_and_restart_between_two_polls_still_records_both_steps(sim, synced):
    job_id = sim.submit_job(JobSubmission(script=JOB, user="alice"))
    synced(timedelta(seconds=1))
    sim.requeue_job(job_id)
    sim.start_now(job_id)
    synced(timedelta(seconds=1))
    steps = list(
        JobStateChange.objects.filter(job__slurm_id=job_id)
        .order_by("id")
        .values_list("from_state", "to_state")
    )
    assert steps[-2:] == [("RUNNING", "PENDING"), ("PENDING", "RUNNING")]


class UnreachableController:
    def __init__(self, real):
        self.real = real

    def partitions(self):
        raise BackendError("Unable to contact slurm controller (connect failure)", permanent=False)

    nodes = jobs = partitions


def test_an_unreachable_controller_is_an_outage_and_nothing_is_lost(sim, cluster, synced):
    sim.submit_job(JobSubmission(script=JOB, user="alice"))
    synced(timedelta(seconds=1))
    before = list(Node.objects.order_by("name").values_list("name", "status"))
    running = Job.objects.filter(state="RUNNING").count()
    result = sync_once(cluster, UnreachableController(sim))
    cluster.refresh_from_db()
    assert result.controller_up is False
    assert cluster.controller_up is False and cluster.controller_down_since is not None
    assert list(Node.objects.order_by("name").values_list("name", "status")) == before
    assert Job.objects.filter(state="RUNNING").count() == running
    sync_once(cluster, sim)
    assert Cluster.objects.get(pk=cluster.pk).controller_up is True


def test_a_job_that_leaves_slurm_is_closed_not_deleted(sim, cluster, synced):
    job_id = sim.submit_job(JobSubmission(script=JOB, user="alice"))
    synced(timedelta(seconds=1))
    del sim._jobs[job_id]
    synced()
    job = Job.objects.get(slurm_id=job_id)
    assert job.state == "COMPLETED"
    assert "no longer reported" in job.reason
