"""Chaos: slurmctld stops in the middle of a remediation on the real local Slurm, then returns.

A replacement of gpu-02 (which runs a requeueable 2-node job) has drained the
node, signalled the job and waited out its grace; slurmctld is stopped just
before the requeue. The engine must park the run (WAITING, with backoff, never
FAILED), resume once slurmctld is back, and do nothing twice: one drain, one
requeue (the job's restart count is 1), one spare moved.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from django.utils import timezone

from clusters.backends.base import JobSubmission
from clusters.backends.slurm_spares import SlurmSparesFleet
from clusters.models import Cluster, Node
from remediation.engine import Engine
from remediation.models import Remediation, StepOutcome, Trigger
from remediation.services import create_run
from remediation.transitions import RunStatus
from sync.cycle import sync_once
from tests.plugins.cluster_state import wait_until_registered
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.slurm_versions,
    pytest.mark.integration,
    pytest.mark.django_db,
]

# The batch shell traps the checkpoint signal (USR1 would otherwise end it) and
# sleeps in short steps so that the trap runs at once.
REQUEUEABLE_JOB = """#!/bin/bash
#SBATCH --job-name=chaos-ctld
#SBATCH --partition=train
#SBATCH --nodes=2
#SBATCH --gres=gpu:8
#SBATCH --requeue
#SBATCH --output=/dev/null
trap 'echo checkpoint' USR1
while true; do sleep 1; done
"""
ACTIONS = frozenset({"drain_node", "requeue_job", "fail_node", "replace", "cancel_job"})


class Recording:
    """Passes every call through to the wrapped backend or fleet, noting the actions."""

    def __init__(self, wrapped, calls: list[str]):
        self._wrapped, self._calls = wrapped, calls

    # The backend's ChecksRunOnThisHost, defined and not only forwarded: from Python
    # 3.12, isinstance() looks a capability up on the class, where __getattr__ is unseen.
    @property
    def slurm_conf(self) -> str:
        return self._wrapped.slurm_conf

    def checks_run_on_this_host(self) -> bool:
        return self._wrapped.checks_run_on_this_host()

    def __getattr__(self, name):
        value = getattr(self._wrapped, name)
        if name not in ACTIONS:
            return value

        def call(*args, **kwargs):
            self._calls.append(f"{name} {' '.join(map(str, args[:1]))}")
            return value(*args, **kwargs)

        return call


def ctld_pid_file() -> Path:
    state = os.environ.get("MEDBAY_MINICLUSTER_STATE", "/var/tmp/medbay-minicluster")
    return Path(state) / "run" / "slurmctld.pid"


def stop_slurmctld(slurm) -> None:
    pid = int(ctld_pid_file().read_text().strip())
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), 30, "slurmctld to exit")
    assert not slurm.controller_up()


def start_slurmctld(slurm) -> None:
    """Start slurmctld as `up` does, without its other work: `up` regenerates the config
    and would restart every daemon if an earlier test left a health check in it. Without
    -c, slurmctld recovers its saved state (jobs, drains) as after a real crash.

    Like `up`, wait until every slurmd has registered again: until then 22.05 reads the
    nodes `unknown` (~5 s here), so the spares are not idle and the engine's replace,
    ~6 s after the start, found "No free spare" whenever the registration was late."""
    log = ctld_pid_file().parent.parent / "log" / "slurmctld.log"
    ctld_pid_file().unlink(missing_ok=True)
    with open(log, "ab") as stderr:
        subprocess.run(["slurmctld", "-f", slurm.slurm_conf], stderr=stderr, timeout=60, check=True)
    wait_for(slurm.controller_up, 30, f"slurmctld to answer again (see {log})")
    wait_until_registered(slurm)


@pytest.fixture
def slurmctld_running_after(slurm):
    """slurmctld started again if the test stopped it and failed before restarting it:
    the `slurm` fixture then restores the nodes (and fails a test that left it down)."""
    yield
    if not slurm.controller_up():
        start_slurmctld(slurm)


def one_step(engine, run) -> None:
    """Advance the run by one step (run_once would go on to the end)."""
    Remediation.objects.filter(pk=run.pk, status=RunStatus.WAITING).update(due_at=timezone.now())
    claimed = engine.claim()
    if claimed is not None:
        engine.advance(claimed)
    run.refresh_from_db()


def advance_until_step(engine, run, name: str, timeout_s: float) -> None:
    def reached():
        if run.step_name == name:
            return True
        assert run.status in (RunStatus.RUNNING, RunStatus.WAITING), run.message
        one_step(engine, run)
        return False

    wait_for(reached, timeout_s, f"the run to reach {name}", interval_s=0.2)


def test_a_slurmctld_restart_mid_remediation_parks_the_run_and_nothing_is_done_twice(
    slurm, slurmctld_running_after
):
    cluster = Cluster.objects.create(name="chaos", backend="slurm")
    sync_once(cluster, slurm)
    job_id = slurm.submit_job(JobSubmission(script=REQUEUEABLE_JOB, user="alice"))
    job = wait_for(
        lambda: (lambda j: j if j.state == "RUNNING" else None)(slurm.job(job_id)),
        30,
        "the job to start",
    )
    assert job.nodes == ("gpu-01", "gpu-02") and job.restart_count == 0
    sync_once(cluster, slurm)

    run = create_run(
        Node.objects.get(cluster=cluster, name="gpu-02"),
        "replace",
        trigger=Trigger.ADMIN,
        reason="chaos: slurmctld restart",
        context={"grace_s": 1, "verify_after_s": 1},
    )
    calls: list[str] = []
    engine = Engine(
        "chaos",
        backend=Recording(slurm, calls),
        fleet=Recording(SlurmSparesFleet(slurm), calls),
    )
    advance_until_step(engine, run, "requeue_jobs", 60)
    assert calls == ["drain_node gpu-02"]

    stop_slurmctld(slurm)
    try:
        one_step(engine, run)
        assert run.status == RunStatus.WAITING, list(
            run.steps.values_list("name", "outcome", "message")
        )
        assert run.step_name == "requeue_jobs"
        assert run.due_at > timezone.now()
        failure = run.steps.filter(name="requeue_jobs").latest("id")
        assert failure.outcome == StepOutcome.FAILED
        assert failure.message.startswith("retrying in 2s:"), failure.message
        # Still down at the next try: a longer wait, still not a failure of the run.
        one_step(engine, run)
        assert run.status == RunStatus.WAITING
        assert (
            run.steps.filter(name="requeue_jobs").latest("id").message.startswith("retrying in 4s:")
        )
    finally:
        start_slurmctld(slurm)

    def finished():
        engine.run_once()
        sync_once(cluster, slurm)
        run.refresh_from_db()
        return run.status not in (RunStatus.RUNNING, RunStatus.WAITING)

    wait_for(finished, 150, "the run to finish after slurmctld returned", interval_s=0.5)
    assert run.status == RunStatus.SUCCEEDED, run.message

    assert calls.count("drain_node gpu-02") == 1
    assert calls.count(f"requeue_job {job_id}") == 1
    assert calls.count("replace gpu-02") == 1
    statuses = list(run.status_changes.values_list("to_status", flat=True))
    assert RunStatus.WAITING in statuses and RunStatus.FAILED not in statuses
    requeues = run.steps.filter(name="requeue_jobs").values_list("outcome", flat=True)
    assert list(requeues).count(StepOutcome.SUCCEEDED) == 1

    nodes = {info.name: info for info in slurm.nodes()}
    partitions = {info.name: info.nodes for info in slurm.partitions()}
    assert "gpu-05" in partitions["train"] and "gpu-02" not in partitions["train"]
    assert list(partitions["spare"]) == ["gpu-06"]
    assert "fail" in nodes["gpu-02"].flags
    job = wait_for(
        lambda: (lambda j: j if j.state == "RUNNING" else None)(slurm.job(job_id)),
        30,
        "the job to run again",
    )
    assert job.restart_count == 1
