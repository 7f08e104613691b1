from datetime import timedelta

from django.utils import timezone

from jobs.models import Job, JobProgress
from remediation.actions import impact_preview


def test_the_preview_lists_the_running_jobs_their_users_and_gpus(jobs, node):
    impact = impact_preview(node("gpu-03"), "reboot")
    assert [(j.slurm_id, j.name, j.user, j.gpus) for j in impact.jobs] == [
        (jobs["eval-bob"], "eval-bob", "bob", 4),
        (jobs["eval-alice"], "eval-alice", "alice", 2),
    ]
    assert impact.users == ["alice", "bob"]
    assert impact.gpu_count == 6
    assert impact.interrupts_jobs and impact.grace_s == 120


def test_a_multi_node_job_counts_all_its_gpus_on_each_of_its_nodes(jobs, node):
    for name in ("gpu-01", "gpu-02"):
        impact = impact_preview(node(name), "replace")
        assert [j.slurm_id for j in impact.jobs] == [jobs["pretrain"]]
        assert impact.gpu_count == 16


def test_an_idle_node_affects_nobody(jobs, node):
    impact = impact_preview(node("gpu-04"), "reboot")
    assert impact.jobs == [] and impact.users == [] and impact.gpu_count == 0


def test_finished_jobs_are_not_in_the_preview(jobs, node, synced, sim):
    sim.cancel_job(jobs["eval-bob"])
    synced()
    impact = impact_preview(node("gpu-03"), "reboot")
    assert [j.user for j in impact.jobs] == ["alice"]


def test_the_preview_gives_the_time_since_each_jobs_last_checkpoint(jobs, node):
    job = Job.objects.get(slurm_id=jobs["eval-bob"])
    now = timezone.now()
    JobProgress.objects.create(
        job=job, step=100, checkpoint_saved=True, reported_at=now - timedelta(minutes=50)
    )
    JobProgress.objects.create(
        job=job, step=150, checkpoint_saved=True, reported_at=now - timedelta(minutes=20)
    )
    JobProgress.objects.create(
        job=job, step=170, checkpoint_saved=False, reported_at=now - timedelta(minutes=1)
    )
    by_name = {j.name: j for j in impact_preview(node("gpu-03"), "reboot").jobs}
    since = by_name["eval-bob"].since_checkpoint
    assert timedelta(minutes=19) < since < timedelta(minutes=21)
    assert by_name["eval-alice"].since_checkpoint is None


def test_a_replace_preview_shows_the_free_spares_and_a_drain_interrupts_nothing(jobs, node):
    replace = impact_preview(node("gpu-03"), "replace")
    assert replace.spares == ["gpu-06", "gpu-07"]
    drain = impact_preview(node("gpu-03"), "drain")
    assert drain.spares == [] and not drain.interrupts_jobs
    assert len(drain.jobs) == 2
