"""The job page says nothing untrue (#30 item 3): each figure checked on recorded state."""

from __future__ import annotations

import html
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import Job

pytestmark = pytest.mark.django_db


def page_of(client, slurm_id: int) -> str:
    return html.unescape(client.get(f"/jobs/{slurm_id}/", follow=True).content.decode())


def test_gpu_hours_are_never_negative_when_slurm_starts_a_job_a_moment_after_our_now(
    login, researcher, cluster
):
    ahead = timezone.now() + timedelta(seconds=30)  # another host's clock, a little fast
    Job.objects.create(
        cluster=cluster, slurm_id=77, user="alice", state="RUNNING", gpus=8, start_at=ahead
    )
    client = login(researcher)

    queue_row = client.get("/jobs/").content.decode()
    job_page = page_of(client, 77)
    api = client.get("/api/v1/jobs/?sort=gpu_hours").json()

    assert '<td class="gpu-hours">0.0</td>' in queue_row
    assert '<td class="gpu-hours">0.0</td>' in job_page
    assert 'class="gpu-hours">-' not in queue_row + job_page
    assert all((row.get("gpu_hours") or 0) >= 0 for row in api["results"])


def test_after_the_demos_warm_up_started_agrees_with_the_timelines_running_row(db):
    from clusters.backends.base import JobSubmission
    from clusters.backends.simulated import SimulatedCluster
    from clusters.models import Cluster
    from demo.simulation import SimulationLoop
    from jobs.models import JobStateChange

    sim = SimulatedCluster.standard(train=4, infer=1, spare=1, time_scale=60, start=timezone.now())
    sim.fault_rate_per_gpu_day = 0
    sim.add_partition("solo")  # a node of its own, free when the late job comes
    sim.add_node("solo-01", "solo")
    sim.generate_workload()
    loop = SimulationLoop(sim, Cluster.objects.create(name="demo", backend="simulated"))
    loop.warm_up(timedelta(minutes=30))  # what `manage.py demo` does before serving
    script = "#!/bin/bash\n#SBATCH --job-name=late\n#SBATCH --partition=solo\nsrun x\n"
    job_id = sim.submit_job(JobSubmission(script=script, user="alice"))

    loop.step(timedelta(0))

    job = Job.objects.get(slurm_id=job_id)
    assert job.state == "RUNNING", (job.state, job.reason)
    running = JobStateChange.objects.get(job=job, to_state="RUNNING")
    assert job.start_at <= timezone.now()
    assert abs(job.start_at - running.at) < timedelta(seconds=5)
    assert all(j.start_at <= timezone.now() for j in Job.objects.exclude(start_at=None))


def test_the_demo_shows_when_a_node_reason_was_set_on_the_wall_clock(db):
    from clusters.backends.simulated import SimulatedCluster
    from clusters.models import Cluster, Node
    from demo.simulation import SimulationLoop

    sim = SimulatedCluster.standard(train=2, infer=1, spare=1, time_scale=60, start=timezone.now())
    sim.fault_rate_per_gpu_day = 0
    loop = SimulationLoop(sim, Cluster.objects.create(name="demo", backend="simulated"))
    sim.advance(timedelta(hours=8))  # simulated time runs 60 times faster than ours

    sim.drain_node("gpu-01", "firmware")
    loop.sync()

    set_at = Node.objects.get(name="gpu-01").reason_set_at
    assert abs(set_at - timezone.now()) < timedelta(minutes=10)


def test_the_simulated_log_numbers_attempts_from_one(sim):
    from clusters.backends.base import JobSubmission

    script = "#!/bin/bash\n#SBATCH --job-name=count\n#SBATCH --partition=train\nsrun x\n"
    job_id = sim.submit_job(JobSubmission(script=script, user="alice"))
    sim.advance(timedelta(seconds=1))
    sim.requeue_job(job_id)
    sim.advance(timedelta(minutes=5))

    path = sim.job_output_paths(job_id).stdout
    log = sim.read_job_file("alice", path, 65536).text

    assert sim.job(job_id).state == "RUNNING"
    assert log.startswith("attempt 2: resumed from checkpoint\n")
    assert "attempt 0" not in log


def test_cancelling_a_job_asks_first_and_a_bare_post_cancels_nothing(
    login, researcher, submit_as, sim, synced
):
    slurm_id = submit_as(researcher)
    synced(timedelta(seconds=1))
    client = login(researcher)

    page = client.get(f"/jobs/{slurm_id}/", follow=True).content.decode()
    bare = client.post(f"/jobs/{slurm_id}/cancel", follow=True)
    still = sim.job(slurm_id).state
    confirmed = client.post(f"/jobs/{slurm_id}/cancel", {"confirm": "yes"}, follow=True)

    assert '<summary class="button danger" id="cancel-job">Cancel job…</summary>' in page
    assert f"Yes, cancel job {slurm_id}" in page
    assert "onclick" not in page and "onsubmit" not in page
    assert still == "RUNNING"
    assert f"Job {slurm_id} was not cancelled: confirm it first." in bare.content.decode()
    assert f"Job {slurm_id} cancelled." in confirmed.content.decode()
    assert sim.job(slurm_id).state == "CANCELLED"


def test_the_demos_job_scripts_report_to_the_portals_own_address(
    db, job_form, settings, monkeypatch
):
    from django.core.management import call_command

    from clusters.models import Cluster
    from jobs.forms import JobForm
    from jobs.sbatch import render_sbatch

    monkeypatch.delenv("MEDBAY_PORTAL_URL", raising=False)
    settings.MEDBAY_PORTAL_URL = "http://127.0.0.1:8000"
    call_command("demo", "--no-serve", "--addr", "127.0.0.1:8110", "--nodes", "4",
                 "--history-days", "0")  # fmt: skip

    form = JobForm({**job_form, "gpus_per_node": 1}, cluster=Cluster.objects.get(name="demo"))
    assert form.is_valid(), form.errors
    assert "export MEDBAY_PORTAL_URL=http://127.0.0.1:8110\n" in render_sbatch(form.params)
