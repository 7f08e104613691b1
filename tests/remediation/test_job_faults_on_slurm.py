"""A job's own fault on the real local Slurm: alice's 4-node job crashes with XID 13 on
every GPU of every node, each node's agent reports it with its own token within a
second, and Medbay takes no node out of service; her job page says it was the
application."""

from __future__ import annotations

import pytest
from django.utils import timezone

from clusters.backends.base import JobSubmission
from clusters.models import Cluster, Node
from health.models import FaultGroup, Incident, NodeToken
from remediation.models import Remediation
from sync.cycle import sync_once
from tests.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions, pytest.mark.django_db]

FOUR_NODE_JOB = """#!/bin/bash
#SBATCH --job-name=crash-on-every-rank
#SBATCH --output=/dev/null
#SBATCH --partition=train
#SBATCH --nodes=4
#SBATCH --gres=gpu:8
sleep 600
"""


def xid_13_on_every_gpu(name: str) -> dict:
    now = timezone.now().isoformat()
    events = [
        {
            "id": f"{name}-xid13-{gpu}",
            "kind": "xid",
            "xid": 13,
            "gpu_index": gpu,
            "message": "Graphics Exception: ESR 0x405840=0x1000000",
            "observed_at": now,
        }
        for gpu in range(8)
    ]
    return {"node": name, "events": events}


def test_xid_13_from_every_node_of_a_four_node_job_takes_no_node_out_of_service(
    slurm, client, researcher, settings, django_capture_on_commit_callbacks
):
    settings.MEDBAY_JOB_FAULT_WINDOW_S = 30
    cluster = Cluster.objects.create(name="minicluster", backend="slurm")
    job_id = slurm.submit_job(JobSubmission(script=FOUR_NODE_JOB, user="alice", workdir="/tmp"))
    wait_for(lambda: slurm.job(job_id).state == "RUNNING", 60, "the 4-node job to start")
    nodes = list(slurm.job(job_id).nodes)
    assert len(nodes) == 4
    sync_once(cluster, slurm)

    with django_capture_on_commit_callbacks(execute=True):
        for name in nodes:  # each node's agent, with its own token
            _, raw = NodeToken.issue(Node.objects.get(cluster=cluster, name=name))
            answer = client.post(
                "/api/v1/health/events/",
                xid_13_on_every_gpu(name),
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {raw}",
            )
            assert answer.status_code in (200, 201), answer.content

    assert not Remediation.objects.exists()
    group = FaultGroup.objects.get()
    assert group.slurm_job_id == job_id
    assert Incident.objects.filter(group=group).count() == 32
    assert not Incident.objects.filter(group=None).exists()
    sync_once(cluster, slurm)
    in_slurm = {info.name: info for info in slurm.nodes()}
    for name in nodes:  # none left service
        assert not in_slurm[name].flags & {"drain", "fail"}, in_slurm[name]
        assert in_slurm[name].state != "down"

    client.force_login(researcher)
    page = client.get(f"/jobs/{job_id}/", follow=True).content.decode()
    assert "XID 13 on 32 GPUs of 4 nodes" in page
    assert "an error in the application, not in the hardware" in page
