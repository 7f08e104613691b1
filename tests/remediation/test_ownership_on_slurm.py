"""Issue 13 on the real local Slurm: Medbay never undoes an admin's drain or partition
edit, escalates instead of dropping a fault, retries a stuck run, and takes a replaced
node all the way back to the spare pool."""

from __future__ import annotations

import subprocess

import pytest
from django.utils import timezone

from clusters.backends.base import JobSubmission
from clusters.backends.slurm_spares import SlurmSparesFleet
from clusters.models import Cluster, Node, Partition
from remediation import actions
from remediation.engine import Engine
from remediation.models import Action, Remediation, Trigger
from remediation.services import create_run
from remediation.transitions import RunStatus
from sync.cycle import sync_once
from tests.plugins.slurm_cluster import clean_up
from tests.remediation.conftest import ingest_xid
from tests.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions, pytest.mark.django_db]

ADMIN_REASON = "medbay-test: maint PSU swap"
NODES = ("gpu-02", "gpu-03", "gpu-04", "gpu-05", "gpu-06")


JOB_ON_GPU_04 = """#!/bin/bash
#SBATCH --job-name=medbay-test-restart-me
#SBATCH --output=/dev/null
#SBATCH --partition=train
#SBATCH --nodelist=gpu-04
#SBATCH --gres=gpu:8
sleep 600
"""


@pytest.fixture
def world(slurm, admin_user):
    """A synced cluster on a clean minicluster; every node this file touches is
    resumed afterwards (the slurm fixture then restores the partitions)."""
    clean_up(slurm)
    _resume(slurm)
    cluster = Cluster.objects.create(name="minicluster", backend="slurm")
    sync_once(cluster, slurm)
    Partition.objects.filter(cluster=cluster).update(checkpoint_grace_s=0)
    engine = Engine("issue-13", backend=slurm, fleet=SlurmSparesFleet(slurm))
    yield cluster, engine
    _resume(slurm)


def _resume(slurm):
    for info in slurm.nodes():
        if info.name in NODES and (info.flags & {"drain", "fail"} or info.state == "down"):
            slurm.resume_node(info.name)


def scontrol(slurm, *args: str) -> None:
    subprocess.run(["scontrol", *args], check=True, env=slurm.command_env(), timeout=30)


def node(slurm, name):
    return next(info for info in slurm.nodes() if info.name == name)


def members(slurm):
    return {info.name: set(info.nodes) for info in slurm.partitions()}


def drive(engine, cluster, slurm, run, stop, timeout_s=90):
    """Engine passes and syncs until STOP(run), as the worker and the sync loop would."""

    def reached():
        engine.run_once()
        sync_once(cluster, slurm)
        Remediation.objects.filter(status=RunStatus.WAITING).update(due_at=timezone.now())
        run.refresh_from_db()
        return stop(run)

    wait_for(reached, timeout_s, f"run {run.pk} to move on", explain=lambda: run.message)


def settled(run):
    return run.status not in (RunStatus.RUNNING, RunStatus.WAITING)


def replace_gpu_02(cluster, engine, slurm, admin_user):
    run = create_run(
        Node.objects.get(cluster=cluster, name="gpu-02"), Action.REPLACE, trigger=Trigger.ADMIN,
        reason="medbay-test fan failure", requested_by=admin_user, context={"grace_s": 0},
    )  # fmt: skip
    drive(engine, cluster, slurm, run, settled)
    return run


def test_an_admins_drain_survives_a_reset_run_and_stays_with_its_reason(slurm, world, admin_user):
    cluster, engine = world
    scontrol(slurm, "update", "nodename=gpu-03", "state=drain", f"reason={ADMIN_REASON}")
    sync_once(cluster, slurm)
    gpu_03 = Node.objects.get(cluster=cluster, name="gpu-03")
    assert gpu_03.reason_set_by == "root" and gpu_03.held_by.startswith(f"{ADMIN_REASON} (root, ")
    run = create_run(
        gpu_03, Action.RESET_GPU, trigger=Trigger.HEALTH_EVENT,
        reason="XID 48 GPU 2 double bit ECC", context={"gpu": 2, "grace_s": 0},
    )  # fmt: skip

    # Real Slurm cannot reset a GPU: the run asks an admin, who resets and retries.
    drive(engine, cluster, slurm, run, lambda r: r.status == RunStatus.NEEDS_ATTENTION)
    assert run.step_name == "reset_gpu", run.message
    while_held = node(slurm, "gpu-03").reason
    assert while_held.startswith(f"medbay: XID 48 GPU 2 double bit ECC [run {run.pk}] | held: ")
    assert f"{ADMIN_REASON} (root, " in while_held
    actions.retry(run, admin_user, "GPU 2 reset by hand")
    drive(engine, cluster, slurm, run, settled, timeout_s=120)

    assert run.status == RunStatus.SUCCEEDED, run.message
    info = node(slurm, "gpu-03")
    assert "drain" in info.flags and info.reason == ADMIN_REASON
    assert run.message.startswith(f"all steps done; left drained for: {ADMIN_REASON} (root, ")


def test_an_xid_48_after_a_pending_xid_31_run_escalates(
    slurm, world, admin_user, django_capture_on_commit_callbacks
):
    cluster, engine = world
    # A job to restart: an XID 31 on a node running none starts no run at all.
    job = slurm.submit_job(JobSubmission(script=JOB_ON_GPU_04, user="bob"))
    wait_for(lambda: slurm.job(job).state == "RUNNING", 30, "bob's job on gpu-04")
    sync_once(cluster, slurm)
    with django_capture_on_commit_callbacks(execute=True):
        ingest_xid("gpu-04", 31, gpu=1)
    milder = Remediation.objects.get(node__name="gpu-04")
    assert milder.status == RunStatus.AWAITING_APPROVAL

    with django_capture_on_commit_callbacks(execute=True):
        ingest_xid("gpu-04", 48, gpu=4)

    milder.refresh_from_db()
    drastic = milder.superseded_by
    assert milder.status == RunStatus.CANCELLED and drastic is not None
    assert milder.message.startswith(f"superseded by run {drastic.pk}: XID 48 GPU 4")
    assert drastic.status == RunStatus.AWAITING_APPROVAL
    actions.approve(drastic, admin_user, "go")
    engine.advance(engine.claim())
    reason = node(slurm, "gpu-04").reason
    assert reason.startswith("medbay: XID 48 GPU 4") and reason.endswith(f"[run {drastic.pk}]")
    actions.cancel(drastic, admin_user, "medbay-test done")


def test_a_run_that_needs_attention_finishes_when_retried_after_a_spare_is_freed(
    slurm, world, admin_user
):
    cluster, engine = world
    for spare in ("gpu-05", "gpu-06"):
        scontrol(slurm, "update", f"nodename={spare}", "state=drain", "reason=medbay-test lent")
    sync_once(cluster, slurm)
    run = replace_gpu_02(cluster, engine, slurm, admin_user)
    assert run.status == RunStatus.NEEDS_ATTENTION and run.step_name == "check_eligibility"

    scontrol(slurm, "update", "nodename=gpu-05", "state=resume")
    fleet = SlurmSparesFleet(slurm)
    wait_for(lambda: "gpu-05" in fleet.spare_capacity(), 30, "gpu-05 to be a free spare")
    actions.retry(run, admin_user, "gpu-05 is free again")
    drive(engine, cluster, slurm, run, settled)

    assert run.status == RunStatus.SUCCEEDED, run.message
    assert "gpu-05" in members(slurm)["train"] and "gpu-02" not in members(slurm)["train"]
    assert "fail" in node(slurm, "gpu-02").flags


def test_a_replaced_node_returns_to_the_spare_pool_through_return_to_service(
    slurm, world, admin_user
):
    cluster, engine = world
    assert replace_gpu_02(cluster, engine, slurm, admin_user).status == RunStatus.SUCCEEDED
    sync_once(cluster, slurm)
    gpu_02 = actions.mark_in_repair(
        Node.objects.get(cluster=cluster, name="gpu-02"), user=admin_user, note="RMA 4711"
    )
    assert gpu_02.status == "in_repair"

    run = actions.request_action(
        gpu_02, Action.RETURN_TO_SERVICE, user=admin_user, reason="PSU swapped", confirm=True
    )
    drive(engine, cluster, slurm, run, settled, timeout_s=120)

    assert run.status == RunStatus.SUCCEEDED, run.message
    assert [s.name for s in run.steps.all()] == ["validate", "return_pool", "resume"]
    info = node(slurm, "gpu-02")
    assert info.partitions == ("spare",) and info.state == "idle"
    assert not info.flags & {"drain", "fail"}
    sync_once(cluster, slurm)
    gpu_02.refresh_from_db()
    assert (gpu_02.status, gpu_02.in_repair_since) == ("spare", None)


def test_an_admins_partition_edit_is_not_reverted(slurm, world, admin_user, settings):
    settings.MEDBAY_REAPPLY_POOLS = True
    cluster, engine = world
    assert replace_gpu_02(cluster, engine, slurm, admin_user).status == RunStatus.SUCCEEDED
    sync_once(cluster, slurm)

    # The admin puts the partitions back by hand, as slurm.conf has them.
    scontrol(slurm, "update", "partitionname=train", "nodes=gpu-[01-04]")
    scontrol(slurm, "update", "partitionname=spare", "nodes=gpu-[05-06]")
    for _ in range(3):
        result = sync_once(cluster, slurm)
        assert result.reapplied is False and result.partition_drift == {}

    assert members(slurm)["train"] == {"gpu-01", "gpu-02", "gpu-03", "gpu-04"}
    assert members(slurm)["spare"] == {"gpu-05", "gpu-06"}
    cluster.refresh_from_db()
    assert set(cluster.partition_edits) == {"gpu-02", "gpu-05"}
    assert cluster.partition_edits["gpu-02"]["slurm"] == ["train"]
    from clusters import drift

    drift.adopt(cluster, ["gpu-02", "gpu-05"], actor="admin")
    sync_once(cluster, slurm)
    assert Cluster.objects.get(pk=cluster.pk).partition_edits == {}
    assert members(slurm)["train"] == {"gpu-01", "gpu-02", "gpu-03", "gpu-04"}
