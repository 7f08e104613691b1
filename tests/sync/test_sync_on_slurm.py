"""Slurm -> database reconciliation against the real local cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from clusters.backends.base import BackendError, JobSubmission
from clusters.drift import reapply_hook
from clusters.models import Cluster, Node, NodeStatus
from jobs.models import Job, JobStateChange
from portal.consumers import LiveConsumer
from remediation.steps.records import record_membership
from sync.cycle import sync_once
from sync.loop import ensure_cluster
from tests.conftest import PASSWORD
from tests.plugins.slurm_cluster import TEST_REASON_PREFIX, UP
from tests.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions]

TWO_NODES = "#!/bin/bash\n#SBATCH -N2 --gres=gpu:8 --time=10\nsleep 600\n"
ONE_NODE = "#!/bin/bash\n#SBATCH -N1 --gres=gpu:8 --time=10\nsleep 600\n"
TRAIN = ("gpu-01", "gpu-02", "gpu-03", "gpu-04")


@pytest.fixture
def cluster(db, slurm):
    return ensure_cluster(slurm)


def synced_job(cluster, slurm, job_id: int, state: str, **expected):
    def check():
        """the job to reach the state in the database"""
        sync_once(cluster, slurm)
        job = Job.objects.filter(slurm_id=job_id).first()
        matches = job and job.state == state
        return job if matches and all(getattr(job, k) == v for k, v in expected.items()) else None

    return check


def submit(slurm, script: str) -> int:
    return slurm.submit_job(JobSubmission(script=script, user="root"))


def logged_in(user) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def test_the_cluster_row_carries_slurms_name_and_version(cluster, slurm):
    assert cluster.name == "medbay"
    assert cluster.slurm_version.startswith(".".join(f"{n:02d}" for n in slurm.slurm_version))


def test_a_two_node_job_is_running_in_the_database_with_sixteen_gpus(cluster, slurm):
    job_id = submit(slurm, TWO_NODES)
    job = wait_for(synced_job(cluster, slurm, job_id, "RUNNING"), timeout_s=15)
    assert (job.gpus, job.node_count, job.user) == (16, 2, "root")
    assert sorted(job.nodes.values_list("name", flat=True)) == sorted(job.node_names)
    # MIXED when the job holds all GPUs but not every CPU of the node.
    busy = {NodeStatus.ALLOCATED, NodeStatus.MIXED}

    def allocated():
        """the job's nodes to show as busy with 8 GPUs each"""
        # Nodes are read before jobs, so the cycle that first sees the job may
        # still hold the nodes as idle; the next one cannot.
        sync_once(cluster, slurm)
        nodes = Node.objects.filter(name__in=job.node_names)
        return [(n.status in busy, n.gpus_used) for n in nodes] == [(True, 8), (True, 8)]

    wait_for(allocated, timeout_s=5)


def test_a_drain_reason_reaches_the_api_and_the_board(cluster, slurm, researcher):
    sync_once(cluster, slurm)
    reason = f"{TEST_REASON_PREFIX}: XID 79 GPU 3 fallen off the bus"
    slurm.drain_node("gpu-03", reason)
    sync_once(cluster, slurm)
    client = logged_in(researcher)
    body = client.get("/api/v1/nodes/gpu-03/").json()
    assert (body["reason"], body["status"]) == (reason, "drained")
    board = client.get("/").content.decode()
    address = f"/nodes/{cluster.name}/gpu-03/"  # the node's address names its cluster
    assert (
        f'id="node-gpu-03" href="{address}" data-cluster="{cluster.name}"'
        f' data-status="drained" title="{reason}"'
    ) in board


def test_a_requeued_job_counts_a_restart_and_runs_again(cluster, slurm):
    job_id = submit(slurm, ONE_NODE)
    wait_for(synced_job(cluster, slurm, job_id, "RUNNING"), timeout_s=15)
    slurm.requeue_job(job_id)
    wait_for(synced_job(cluster, slurm, job_id, "PENDING", restart_count=1), timeout_s=10)
    requeue = JobStateChange.objects.get(job__slurm_id=job_id, from_state="RUNNING")
    assert (requeue.to_state, requeue.reason) == ("PENDING", "requeued (restart 1)")
    # cred_expire=5: eligible again about 6 s after the requeue, then the next pass starts it.
    wait_for(synced_job(cluster, slurm, job_id, "RUNNING", restart_count=1), timeout_s=25)
    assert (
        JobStateChange.objects.filter(job__slurm_id=job_id, reason__startswith="requeued").count()
        == 1
    )


def test_an_early_release_waits_for_the_old_allocation_and_the_job_survives(cluster, slurm):
    job_id = submit(slurm, ONE_NODE)
    wait_for(synced_job(cluster, slurm, job_id, "RUNNING"), timeout_s=15)
    slurm.requeue_job(job_id)

    def released():
        """start_now to be accepted once the old allocation is gone"""
        try:
            slurm.start_now(job_id)
        except BackendError as error:
            assert not error.permanent, error
            return False
        return True

    wait_for(released, timeout_s=15, interval_s=0.2)

    def in_slurm():
        job = slurm.job(job_id)
        return f"{job.state} ({job.reason}), restarts {job.restart_count}"

    job = wait_for(
        synced_job(cluster, slurm, job_id, "RUNNING", restart_count=1),
        timeout_s=8,
        explain=in_slurm,
    )
    time.sleep(2)  # a revoked credential kills the job within a moment; make sure it did not
    sync_once(cluster, slurm)
    job.refresh_from_db()
    assert (job.state, job.restart_count) == ("RUNNING", 1)


def stop_controller(minicluster) -> None:
    pid_file = Path(minicluster["MEDBAY_MINICLUSTER_STATE"]) / "run" / "slurmctld.pid"
    pid = int(pid_file.read_text().strip())
    os.kill(pid, signal.SIGTERM)

    def gone():
        """slurmctld to exit"""
        return not Path(f"/proc/{pid}").exists()

    wait_for(gone, timeout_s=20)


def start_controller() -> None:
    completed = subprocess.run([str(UP)], capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr


def test_a_stopped_controller_is_an_outage_that_changes_nothing_and_then_recovers(
    cluster, slurm, minicluster, researcher
):
    job_id = submit(slurm, ONE_NODE)
    wait_for(synced_job(cluster, slurm, job_id, "RUNNING"), timeout_s=15)
    nodes_before = list(Node.objects.order_by("name").values_list("name", "status", "reason"))
    jobs_before = list(Job.objects.order_by("slurm_id").values_list("slurm_id", "state"))
    stop_controller(minicluster)
    try:
        result = sync_once(cluster, slurm)
        assert result.controller_up is False
        assert "Unable to contact slurm controller" in result.error
        cluster.refresh_from_db()
        assert cluster.controller_up is False and cluster.controller_down_since is not None
        board = logged_in(researcher).get("/").content.decode()
        assert "Slurm controller unreachable since" in board
        assert list(Node.objects.order_by("name").values_list("name", "status", "reason")) == (
            nodes_before
        )
        assert list(Job.objects.order_by("slurm_id").values_list("slurm_id", "state")) == (
            jobs_before
        )
    finally:
        start_controller()

    def recovered():
        """the sync to reach the restarted controller"""
        return sync_once(cluster, slurm).controller_up

    wait_for(recovered, timeout_s=30)
    assert Cluster.objects.get(pk=cluster.pk).controller_up is True
    assert "Slurm controller unreachable" not in logged_in(researcher).get("/").content.decode()
    assert Job.objects.get(slurm_id=job_id).state == "RUNNING"


def move_spare_into_train(slurm) -> None:
    slurm.set_partition_nodes("train", [*TRAIN, "gpu-05"])
    slurm.set_partition_nodes("spare", ["gpu-06"])


def reconfigure(slurm) -> None:
    slurm.run(["scontrol", "reconfigure"])

    def reverted():
        """slurmctld to put the partitions back to slurm.conf"""
        members = {p.name: p.nodes for p in slurm.partitions()}
        return members.get("spare") == ("gpu-05", "gpu-06")

    wait_for(reverted, timeout_s=15)


def test_a_partition_move_lost_on_reconfigure_is_flagged_as_drift(
    cluster, slurm, settings, researcher
):
    settings.MEDBAY_REAPPLY_POOLS = False
    sync_once(cluster, slurm)
    move_spare_into_train(slurm)
    assert sync_once(cluster, slurm).partition_drift == {}
    assert Node.objects.get(name="gpu-05").pool.kind == "training"
    reconfigure(slurm)
    result = sync_once(cluster, slurm)
    assert result.partition_drift == {
        "spare": {"missing": [], "unexpected": ["gpu-05"]},
        "train": {"missing": ["gpu-05"], "unexpected": []},
    }
    assert "Partition drift" in logged_in(researcher).get("/").content.decode()


def test_a_partition_move_lost_on_reconfigure_is_reapplied_by_the_spare_pool_driver(
    cluster, slurm, settings
):
    settings.MEDBAY_REAPPLY_POOLS = True
    assert reapply_hook() is not None
    sync_once(cluster, slurm)
    move_spare_into_train(slurm)
    # Medbay's own move, recorded as the engine's steps do: only those are re-applied.
    record_membership(cluster.pk, slurm, ["gpu-05"])
    sync_once(cluster, slurm)
    reconfigure(slurm)
    result = sync_once(cluster, slurm)
    assert result.reapplied is True and result.partition_drift == {}
    assert {p.name: p.nodes for p in slurm.partitions()}["spare"] == ("gpu-06",)
    assert Node.objects.get(name="gpu-05").pool.kind == "training"
    assert Cluster.objects.get(pk=cluster.pk).partition_drift == {}


@pytest.mark.django_db(transaction=True)
async def test_a_node_drained_with_scontrol_reaches_an_open_board_within_one_cycle(
    cluster, slurm, researcher
):
    await database_sync_to_async(sync_once)(cluster, slurm)
    comm = WebsocketCommunicator(LiveConsumer.as_asgi(), "/ws/live/?topics=board")
    comm.scope["user"] = researcher
    assert (await comm.connect())[0]
    reason = f"{TEST_REASON_PREFIX}: live drain"
    await database_sync_to_async(slurm.drain_node)("gpu-02", reason)
    started = time.monotonic()
    await database_sync_to_async(sync_once)(cluster, slurm)
    html = await comm.receive_from(timeout=5)
    assert time.monotonic() - started < 2  # one sync cycle (MEDBAY_SYNC_INTERVAL_S)
    assert 'id="node-gpu-02"' in html and "status-drained" in html and reason in html
    await comm.disconnect()
