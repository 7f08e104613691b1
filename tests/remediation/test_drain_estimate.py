"""A run waiting for a node's jobs to end says when it expects the node free (#30 item 6)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from clusters.backends.base import JobSubmission
from clusters.models import Node
from jobs.models import Job
from remediation import actions
from remediation.models import RemediationStep

pytestmark = pytest.mark.django_db


def waiting_message(engine, admin_user, node_name: str) -> str:
    actions.request_action(
        Node.objects.get(name=node_name), "to_inference", user=admin_user, reason="demand"
    )
    for _ in range(3):
        engine.run_once()
    return RemediationStep.objects.get(name="wait_drained").message


def submit(sim, synced, time_directive: str) -> int:
    directives = f"#SBATCH --partition=train\n{time_directive}#SBATCH --gres=gpu:8\n"
    script = f"#!/bin/bash\n{directives}srun x\n"
    job_id = sim.submit_job(JobSubmission(script=script, user="alice"))
    synced(timedelta(seconds=1))
    return job_id


def test_a_move_waiting_on_a_job_says_when_its_time_limit_frees_the_node(
    engine, admin_user, sim, synced
):
    job_id = submit(sim, synced, "#SBATCH --time=90\n")
    node = sim.job(job_id).nodes[0]
    job = Job.objects.get(slurm_id=job_id)
    free_at = timezone.localtime(job.start_at + timedelta(minutes=90)).strftime("%H:%M")

    message = waiting_message(engine, admin_user, node)

    assert message == (
        f"waiting for job {job_id} to end on {node};"
        f" expected free by {free_at}, when the last reaches its time limit"
    )


def test_a_move_waiting_on_a_job_without_a_time_limit_says_it_will_not_end_by_itself(
    engine, admin_user, sim, synced
):
    job_id = submit(sim, synced, "")
    node = sim.job(job_id).nodes[0]
    Job.objects.filter(slurm_id=job_id).update(time_limit_minutes=None)

    message = waiting_message(engine, admin_user, node)

    assert message.endswith(
        f"job {job_id} has no time limit: it ends when its owner or an admin stops it"
    )
