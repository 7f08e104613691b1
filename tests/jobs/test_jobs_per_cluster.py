"""A job of a cluster configured in the table is cancelled, and its output read,
through that cluster's own backend (issue 32)."""

from __future__ import annotations

from clusters.backends import registry
from clusters.backends.base import JobSubmission
from clusters.config import ClusterConfig
from clusters.configure import add_cluster, edit_cluster
from jobs.models import Job
from jobs.services import cancel_job
from sync.cycle import apply_snapshot

SCRIPT = "#!/bin/bash\n#SBATCH --partition=train\n#SBATCH --nodes=1\nsrun sleep 600\n"


def test_cancelling_a_job_of_a_configured_cluster_cancels_it_there_and_nowhere_else(
    sim, synced, admin_user
):
    second = add_cluster("second", ClusterConfig(), by="test")
    second_sim = registry.backend_for(second)
    second_sim.fault_rate_per_gpu_day = 0
    job_id = second_sim.submit_job(JobSubmission(script=SCRIPT, user="alice"))
    # The same Slurm job id on the environment's cluster: it must be left running.
    assert sim.submit_job(JobSubmission(script=SCRIPT, user="alice")) == job_id
    apply_snapshot(second, second_sim.partitions(), second_sim.nodes(), second_sim.jobs())
    synced()

    cancel_job(admin_user, Job.objects.get(cluster=second, slurm_id=job_id))

    assert second_sim.job(job_id).state == "CANCELLED"
    assert sim.job(job_id).state != "CANCELLED"


def test_a_job_is_submitted_to_the_cluster_it_is_recorded_under(
    researcher, cluster, submit_as, submissions
):
    # The job form's cluster, moved into the table: its own simulator, not the process's.
    edit_cluster(cluster.name, by="test")
    cluster.refresh_from_db()
    own = registry.backend_for(cluster)

    job_id = submit_as(researcher)

    assert submissions == []  # nothing reached the environment's simulator
    assert own.job(job_id) is not None
    assert Job.objects.get(slurm_id=job_id).cluster == cluster
