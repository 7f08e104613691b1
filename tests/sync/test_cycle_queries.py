"""The Slurm sync cycle costs the same queries however much changed, and misses nothing."""

from datetime import timedelta

from django.db import connection
from django.test.utils import CaptureQueriesContext

from clusters.backends.base import JobSubmission
from clusters.backends.simulated import SimulatedCluster
from clusters.models import Cluster, Node
from jobs.models import Job, JobState
from sync.cycle import apply_snapshot

SCRIPT = "#!/bin/bash\n#SBATCH --job-name=train\n#SBATCH --partition=train\n#SBATCH --gres=gpu:8\n"


def submit(sim, count: int) -> list[int]:
    script = SCRIPT + "srun x\n"
    return [sim.submit_job(JobSubmission(script=script, user="alice")) for _ in range(count)]


def queries_of_cycle(sim, cluster) -> int:
    with CaptureQueriesContext(connection) as captured:
        apply_snapshot(cluster, sim.partitions(), sim.nodes(), sim.jobs())
    return len(captured)


def change(sim, count: int) -> None:
    """COUNT idle nodes drained, COUNT running jobs cancelled, COUNT new jobs started."""
    running = [info.job_id for info in sim.jobs() if info.state == JobState.RUNNING]
    busy = {name for info in sim.jobs() if info.state == JobState.RUNNING for name in info.nodes}
    idle = [info.name for info in sim.nodes() if info.name not in busy and info.state == "idle"]
    for name in idle[:count]:
        sim.drain_node(name, "medbay: perf regression")
    for job_id in running[:count]:
        sim.cancel_job(job_id)
    submit(sim, count)
    sim.advance(timedelta(seconds=1))


def test_a_cycle_costs_the_same_queries_whether_one_or_many_nodes_and_jobs_change(db):
    sim = SimulatedCluster.standard(train=16, infer=1, spare=2, seed=3)
    sim.fault_rate_per_gpu_day = 0
    cluster = Cluster.objects.create(name="perf", backend="simulated")
    submit(sim, 6)
    sim.advance(timedelta(seconds=1))
    apply_snapshot(cluster, sim.partitions(), sim.nodes(), sim.jobs())

    change(sim, 1)
    one_change = queries_of_cycle(sim, cluster)
    change(sim, 4)
    many_changes = queries_of_cycle(sim, cluster)

    assert many_changes == one_change


def test_every_reported_node_is_marked_seen_by_each_cycle_even_when_unchanged(sim, cluster, synced):
    later = Node.objects.get(name="gpu-03").last_seen_at + timedelta(minutes=5)
    sim.drain_node("gpu-01", "medbay: only this one changes")
    apply_snapshot(cluster, sim.partitions(), sim.nodes(), sim.jobs(), now=later)
    seen = set(Node.objects.filter(cluster=cluster).values_list("last_seen_at", flat=True))
    assert seen == {later}


def test_last_seen_is_rewritten_only_once_it_is_thirty_seconds_old(sim, cluster, synced):
    first = Node.objects.get(name="gpu-03").last_seen_at
    apply_snapshot(
        cluster, sim.partitions(), sim.nodes(), sim.jobs(), now=first + timedelta(seconds=29)
    )
    assert set(Node.objects.values_list("last_seen_at", flat=True)) == {first}
    later = first + timedelta(seconds=30)
    apply_snapshot(cluster, sim.partitions(), sim.nodes(), sim.jobs(), now=later)
    assert set(Node.objects.values_list("last_seen_at", flat=True)) == {later}


def test_a_job_that_starts_is_stored_with_its_nodes_times_and_state(sim, cluster, synced):
    (job_id,) = submit(sim, 1)
    synced()
    sim.advance(timedelta(seconds=30))
    synced()
    reported = next(info for info in sim.jobs() if info.job_id == job_id)
    job = Job.objects.get(cluster=cluster, slurm_id=job_id)
    assert job.state == JobState.RUNNING == reported.state
    assert job.node_names == list(reported.nodes) != []
    assert job.start_at == reported.start_time
    assert job.submit_at == reported.submit_time
    assert sorted(job.nodes.values_list("name", flat=True)) == sorted(reported.nodes)


def test_a_cycle_without_changes_rewrites_no_job_or_node_fields(sim, cluster, synced):
    submit(sim, 2)
    synced()
    before = {
        "jobs": list(Job.objects.order_by("pk").values_list("pk", "updated_at")),
        "nodes": list(Node.objects.order_by("pk").values_list("pk", "updated_at")),
    }
    result = synced()
    assert result.jobs_changed == [] and result.nodes_changed == []
    assert list(Job.objects.order_by("pk").values_list("pk", "updated_at")) == before["jobs"]
    assert list(Node.objects.order_by("pk").values_list("pk", "updated_at")) == before["nodes"]
