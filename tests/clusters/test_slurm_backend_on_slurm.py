"""SlurmBackend against the real local cluster (deploy/minicluster)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from clusters.backends.base import BackendError, JobSubmission
from clusters.backends.slurm import SlurmBackend
from tests.plugins.slurm_cluster import TEST_REASON_PREFIX, UP
from tests.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions]

LONG_JOB = "#!/bin/bash\n#SBATCH --time=10\nsleep 600\n"


def job_in_state(backend, job_id, state):
    def check():
        """the job to reach the state"""
        job = backend.job(job_id)
        return job if job.state == state else None

    return check


def submit(backend, script: str, user: str = "root") -> int:
    return backend.submit_job(JobSubmission(script=script, user=user))


def node_named(backend, name):
    return next(node for node in backend.nodes() if node.name == name)


def train_nodes(backend):
    return next(p for p in backend.partitions() if p.name == "train").nodes


def test_the_cluster_reports_its_version_and_controller(slurm):
    assert slurm.slurm_version >= (22, 5)
    assert slurm.controller_up() is True
    partitions = {p.name: p for p in slurm.partitions()}
    assert partitions["train"].default is True
    assert {"train", "spare", "infer"} <= set(partitions)
    assert all(node.gpus == 8 and node.gpu_model == "h100" for node in slurm.nodes())


def test_a_two_node_job_asking_eight_gpus_per_node_runs_with_sixteen_gpus(slurm):
    script = "#!/bin/bash\n#SBATCH -N2 --gres=gpu:8 --time=10\nsleep 600\n"
    submitted_at = time.monotonic()
    job_id = submit(slurm, script)
    job = wait_for(job_in_state(slurm, job_id, "RUNNING"), timeout_s=15)
    print(f"sbatch -> RUNNING: {time.monotonic() - submitted_at:.2f}s")
    assert job.gpus == 16
    assert len(job.nodes) == 2
    assert job.batch_host == job.nodes[0]
    listed = {j.job_id: j for j in slurm.jobs()}[job_id]
    assert (listed.gpus, listed.nodes) == (16, job.nodes)
    for name in job.nodes:
        assert node_named(slurm, name).gpus_used == 8


def test_a_job_submitted_for_alice_runs_as_alice(slurm):
    job_id = submit(slurm, LONG_JOB, user="alice")
    job = wait_for(job_in_state(slurm, job_id, "RUNNING"), timeout_s=15)
    assert job.user == "alice"


def test_a_drained_node_reads_back_its_reason_in_json_and_text(slurm):
    node = train_nodes(slurm)[-1]
    reason = f"{TEST_REASON_PREFIX} xid 79 GPU fallen off bus"
    slurm.drain_node(node, reason)
    for backend in (slurm, SlurmBackend(slurm.slurm_conf, output="text")):
        info = node_named(backend, node)
        assert "drain" in info.flags
        assert info.reason == reason
        assert info.reason_set_at is not None
    slurm.resume_node(node)
    assert "drain" not in node_named(slurm, node).flags
    slurm.resume_node(node)


def test_draining_a_node_with_a_running_job_leaves_the_job_running(slurm):
    job_id = submit(slurm, "#!/bin/bash\n#SBATCH -N1 --gres=gpu:2 --time=10\nsleep 600\n")
    job = wait_for(job_in_state(slurm, job_id, "RUNNING"), timeout_s=15)
    slurm.drain_node(job.nodes[0], f"{TEST_REASON_PREFIX} draining")
    info = node_named(slurm, job.nodes[0])
    assert (info.state, "drain" in info.flags) == ("mixed", True)
    assert slurm.job(job_id).state == "RUNNING"


def test_an_empty_reason_is_refused(slurm):
    with pytest.raises(BackendError) as caught:
        slurm.drain_node(train_nodes(slurm)[0], "  ")
    assert caught.value.permanent is True
    assert "drain" not in node_named(slurm, train_nodes(slurm)[0]).flags


def test_slurm_refusals_are_permanent_errors(slurm):
    with pytest.raises(BackendError) as unknown_job:
        slurm.hold_job(999999)
    assert unknown_job.value.permanent is True
    assert "Invalid job id" in unknown_job.value.message
    with pytest.raises(BackendError) as unknown_node:
        slurm.drain_node("gpu-99", f"{TEST_REASON_PREFIX} nope")
    assert unknown_node.value.permanent is True
    pending = submit(slurm, "#!/bin/bash\n#SBATCH --hold\nsleep 1\n")
    with pytest.raises(BackendError) as requeue_pending:
        slurm.requeue_job(pending)
    assert requeue_pending.value.permanent is True
    assert "pending" in requeue_pending.value.message


def test_a_requeued_job_runs_again_with_restart_count_one(slurm):
    job_id = submit(slurm, LONG_JOB)
    wait_for(job_in_state(slurm, job_id, "RUNNING"), timeout_s=15)
    requeued_at = time.monotonic()
    slurm.requeue_job(job_id)

    def running_again():
        """the requeued job to run again"""
        job = slurm.job(job_id)
        return job if job.state == "RUNNING" and job.restart_count == 1 else None

    job = wait_for(running_again, timeout_s=25)
    print(f"requeue -> RUNNING: {time.monotonic() - requeued_at:.2f}s")
    assert job.requeue is True


def test_start_now_only_acts_once_the_old_allocation_is_gone(slurm):
    job_id = submit(slurm, LONG_JOB)
    wait_for(job_in_state(slurm, job_id, "RUNNING"), timeout_s=15)
    slurm.requeue_job(job_id)

    def released():
        """start_now to be accepted"""
        try:
            slurm.start_now(job_id)
        except BackendError as error:
            assert error.permanent is False, error.message
            return False
        return True

    wait_for(released, timeout_s=15)
    job = wait_for(job_in_state(slurm, job_id, "RUNNING"), timeout_s=15)
    assert job.restart_count == 1


def test_requeue_hold_keeps_the_job_pending_until_released(slurm):
    job_id = submit(slurm, LONG_JOB)
    wait_for(job_in_state(slurm, job_id, "RUNNING"), timeout_s=15)
    slurm.requeue_job(job_id, hold=True)
    job = wait_for(job_in_state(slurm, job_id, "PENDING"), timeout_s=15)
    assert job.restart_count == 1
    slurm.release_job(job_id)
    assert slurm.job(job_id).state == "PENDING"


def test_moving_a_spare_into_training_shows_as_drift_from_slurm_conf(slurm):
    configured = slurm.configured_partitions()
    spare = configured["spare"][0]
    slurm.set_partition_nodes("train", [*configured["train"], spare])
    slurm.set_partition_nodes("spare", [n for n in configured["spare"] if n != spare])
    live = {p.name: p.nodes for p in slurm.partitions()}
    assert spare in live["train"]
    assert spare not in live["spare"]
    assert live["train"] != configured["train"]


def test_commands_against_a_stopped_controller_are_transient_errors(slurm, minicluster):
    pid_file = Path(minicluster["MEDBAY_MINICLUSTER_STATE"]) / "run" / "slurmctld.pid"
    pid = int(pid_file.read_text().strip())
    try:
        os.kill(pid, 15)
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), timeout_s=20)
        impatient = SlurmBackend(slurm.slurm_conf, timeout=5)
        assert impatient.controller_up() is False
        with pytest.raises(BackendError) as caught:
            impatient.drain_node(train_nodes_from_conf(impatient)[0], f"{TEST_REASON_PREFIX} x")
        assert caught.value.permanent is False
    finally:
        subprocess.run([str(UP)], capture_output=True, text=True, timeout=300, check=True)
    assert slurm.controller_up() is True


def train_nodes_from_conf(backend):
    return backend.configured_partitions()["train"]


def test_the_cluster_runs_slurmdbd_so_alices_and_bobs_jobs_carry_their_teams_in_sacct(
    slurm, minicluster
):
    """Accounting is the minicluster's default on every version: `status` reports
    slurmdbd, jobs carry their user's default account, and sacct lists them once done."""
    status = subprocess.run(
        [str(UP.parent / "status"), "--state", minicluster["MEDBAY_MINICLUSTER_STATE"]],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert status.returncode == 0, status.stdout + status.stderr
    assert re.search(r"^slurmdbd :\d+ +running \(pid \d+\)$", status.stdout, re.M), status.stdout
    since = datetime.now(UTC) - timedelta(minutes=1)
    jobs = {
        user: slurm.submit_job(
            JobSubmission(script="#!/bin/sh\nexit 0\n", user=user, workdir="/tmp")
        )
        for user in ("alice", "bob")
    }
    assert {user: slurm.job(job_id).account for user, job_id in jobs.items()} == {
        "alice": "vision",
        "bob": "nlp",
    }

    def both_in_accounting():
        records = slurm.finished_jobs(since, datetime.now(UTC) + timedelta(minutes=1))
        found = {record.job_id: record for record in records}
        return found if set(jobs.values()) <= set(found) else None

    found = wait_for(both_in_accounting, 30, "both jobs in sacct")
    assert {(found[job_id].user, found[job_id].account) for job_id in jobs.values()} == {
        ("alice", "vision"),
        ("bob", "nlp"),
    }


def test_the_cluster_runs_the_slurm_version_the_session_asked_for(slurm, minicluster):
    """MEDBAY_TEST_SLURM=26.05 must test 26.05's daemons and tools, never the host's 22.05."""
    asked = os.environ.get("MEDBAY_TEST_SLURM") or "22.05"
    major, minor = (int(part) for part in asked.split("."))
    assert slurm.slurm_version == (major, minor)
    assert minicluster["MEDBAY_SLURM_VERSION"] == asked
    printed = subprocess.run(["scontrol", "--version"], capture_output=True, text=True, check=True)
    assert printed.stdout.split()[-1].startswith(asked)
