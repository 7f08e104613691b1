"""Issue 27.5 on the real local Slurm: a spare whose agent reported XID 79 is remediated
to repair (the breaker lets a pool of two heal it), is never chosen even once Slurm
offers it again, and a replace brings in the healthy spare."""

from __future__ import annotations

import subprocess

import pytest
from django.utils import timezone

from clusters.backends.slurm_spares import SlurmSparesFleet
from clusters.models import Cluster, Node, NodeStatus, Partition
from remediation.engine import Engine
from remediation.models import Action, Remediation, Trigger
from remediation.services import create_run
from remediation.transitions import RunStatus
from sync.cycle import sync_once
from tests.plugins.slurm_cluster import clean_up
from tests.remediation.conftest import ingest_xid
from tests.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions, pytest.mark.django_db]

NODES = ("gpu-02", "gpu-05", "gpu-06")


@pytest.fixture
def world(slurm):
    """A synced cluster on a clean minicluster; the nodes this file touches are resumed
    afterwards (the slurm fixture then restores the partitions)."""
    clean_up(slurm)
    _resume(slurm)
    cluster = Cluster.objects.create(name="minicluster", backend="slurm")
    sync_once(cluster, slurm)
    Partition.objects.filter(cluster=cluster).update(checkpoint_grace_s=0)
    yield cluster, Engine("issue-27", backend=slurm, fleet=SlurmSparesFleet(slurm))
    _resume(slurm)


def _resume(slurm):
    for info in slurm.nodes():
        if info.name in NODES and (info.flags & {"drain", "fail"} or info.state == "down"):
            slurm.resume_node(info.name)


def node(slurm, name):
    return next(info for info in slurm.nodes() if info.name == name)


def drive_until_settled(engine, cluster, slurm, run, timeout_s=120):
    def settled():
        engine.run_once()
        sync_once(cluster, slurm)
        Remediation.objects.filter(status=RunStatus.WAITING).update(due_at=timezone.now())
        run.refresh_from_db()
        return run.status not in (RunStatus.RUNNING, RunStatus.WAITING)

    wait_for(settled, timeout_s, f"run {run.pk} to settle", explain=lambda: run.message)


def test_a_spare_that_reported_xid_79_goes_to_repair_and_a_replace_picks_the_healthy_spare(
    slurm, world, admin_user, django_capture_on_commit_callbacks
):
    cluster, engine = world
    with django_capture_on_commit_callbacks(execute=True):
        ingest_xid("gpu-05", 79, gpu=2)  # the agent on spare gpu-05: GPU 2 fell off the bus
    own = Remediation.objects.get(node__name="gpu-05")
    assert (own.action, own.status) == (Action.REPLACE, RunStatus.RUNNING)

    drive_until_settled(engine, cluster, slurm, own)

    assert own.status == RunStatus.SUCCEEDED, own.message
    spare = node(slurm, "gpu-05")
    assert spare.partitions == ("spare",) and "drain" in spare.flags
    assert spare.reason == f"medbay: XID 79 GPU 2 fallen off the bus [run {own.pk}]"
    gpu_05 = Node.objects.get(cluster=cluster, name="gpu-05")
    assert gpu_05.status == NodeStatus.IN_REPAIR and gpu_05.in_repair_since is not None

    # An admin resumes it by hand: Slurm offers it as a free spare again, Medbay does not.
    subprocess.run(
        ["scontrol", "update", "nodename=gpu-05", "state=resume"],
        check=True, env=slurm.command_env(), timeout=30,
    )  # fmt: skip
    fleet = SlurmSparesFleet(slurm)
    wait_for(lambda: fleet.spare_capacity() == ["gpu-05", "gpu-06"], 30, "both spares free")
    run = create_run(
        Node.objects.get(cluster=cluster, name="gpu-02"), Action.REPLACE, trigger=Trigger.ADMIN,
        reason="medbay-test fan failure", requested_by=admin_user, context={"grace_s": 0},
    )  # fmt: skip

    drive_until_settled(engine, cluster, slurm, run)

    assert run.status == RunStatus.SUCCEEDED, run.message
    assert run.context["replacement"] == "gpu-06"
    eligibility = run.steps.get(name="check_eligibility").message
    assert eligibility.startswith("1 healthy free spare(s): gpu-06; not offered: gpu-05 (")
    assert "GPU 2 failed" in eligibility
    members = {info.name: set(info.nodes) for info in slurm.partitions()}
    assert "gpu-06" in members["train"] and "gpu-05" not in members["train"]
    assert "gpu-05" in members["spare"] and "fail" in node(slurm, "gpu-02").flags
