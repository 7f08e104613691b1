"""Admins act from Slurm, on the real local Slurm (22.05 here; 24.11 and 26.05 in
`make test-slurm-versions`): `scontrol update nodename=gpu-02 state=fail
reason="Action:Replace ..."` starts Medbay's run, `sinfo -R` shows Medbay's answer,
and a node about to take jobs is held in a maintenance reservation while it is checked.

Each test syncs with `sync_once`, which hands every snapshot to the request reader as
the sync loop does, and drives the engine (SlurmBackend + SlurmSparesFleet) itself.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from django.utils import timezone

from clusters.backends.base import JobSubmission
from clusters.backends.slurm_spares import SlurmSparesFleet
from clusters.models import Cluster, Partition
from health.validation import validate_node
from jobs.models import Job
from jobs.timeline import build_timeline
from remediation.engine import Engine
from remediation.models import Remediation, SlurmRequest, Trigger
from remediation.slurm_requests import REPLACE_AFTER_DOWN, REPLACE_WAITING
from remediation.transitions import ACTIVE, RunStatus
from sync.cycle import sync_once
from tests.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions, pytest.mark.django_db]

JOB = """#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --output=/dev/null
#SBATCH --partition=train
#SBATCH --nodes=2
#SBATCH --gres=gpu:8
#SBATCH --requeue
sleep 600
"""


@pytest.fixture
def cluster(slurm):
    cluster = Cluster.objects.create(name="minicluster", backend="slurm")
    sync_once(cluster, slurm)
    Partition.objects.filter(cluster=cluster).update(checkpoint_grace_s=0)
    return cluster


def admin_env(slurm) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": slurm.slurm_conf}


def scontrol(slurm, *args: str) -> None:
    """What the admin types, as root, in a terminal."""
    subprocess.run(
        ["scontrol", *args], env=admin_env(slurm), check=True, capture_output=True, text=True
    )


def sinfo_reasons(slurm) -> dict[str, str]:
    """`sinfo -R` as an admin reads it: node -> reason, whole."""
    out = subprocess.run(
        ["sinfo", "-R", "-h", "-N", "-o", "%N|%E"],
        env=admin_env(slurm),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)


def scontrol_reason(slurm, node: str) -> str:
    """The reason `scontrol show node` prints: a replaced node has left every partition,
    so `sinfo -R`, which lists nodes by partition, no longer shows it."""
    out = subprocess.run(
        ["scontrol", "show", "node", node, "--oneliner"],
        env=admin_env(slurm),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    found = re.search(r" Reason=(.*?) \[[^\]]*@[^\]]*\]", out)
    return found.group(1) if found else ""


def two_node_jobs(slurm) -> tuple[int, int]:
    """alice's job on gpu-01/02 and bob's filling gpu-03/04, both running."""
    alice = slurm.submit_job(JobSubmission(script=JOB.format(name="alice-train"), user="alice"))
    wait_for(lambda: slurm.job(alice).state == "RUNNING", 30, "alice's job to start")
    bob = slurm.submit_job(JobSubmission(script=JOB.format(name="bob-train"), user="bob"))
    wait_for(lambda: slurm.job(bob).state == "RUNNING", 30, "bob's job to start")
    assert slurm.job(alice).nodes == ("gpu-01", "gpu-02")
    return alice, bob


class HoldsSeen:
    """The engine's validator, noting which of Medbay's holds exist while it checks."""

    def __init__(self, slurm):
        self.slurm, self.seen = slurm, []

    def __call__(self, backend, node):
        self.seen.append((node, tuple(self.slurm.checks_holds())))
        return validate_node(backend, node)


def drive_until(engine, cluster, slurm, done, timeout_s: float, what: str):
    def step():
        engine.run_once()
        sync_once(cluster, slurm)
        return done()

    return wait_for(step, timeout_s, what, interval_s=0.3)


@pytest.mark.parametrize("form", ["fail", "drain"])
def test_a_replace_request_brings_a_spare_in_at_once_and_lets_the_job_finish(slurm, cluster, form):
    alice, _bob = two_node_jobs(slurm)
    scontrol(slurm, "update", "nodename=gpu-02", f"state={form}", "reason=Action:Replace PSU fan")
    for _ in range(3):  # many sync cycles see one request
        sync_once(cluster, slurm)
    run = Remediation.objects.get()
    assert (run.trigger, run.action, run.planned_steps) == (
        Trigger.SLURM,
        "replace",
        list(REPLACE_WAITING),
    )
    request = SlurmRequest.objects.get()
    assert (request.requested_by, request.form, request.text) == (
        "root",
        form,
        "Action:Replace PSU fan",
    )

    holds = HoldsSeen(slurm)
    engine = Engine("requests", backend=slurm, fleet=SlurmSparesFleet(slurm), validator=holds)
    drive_until(
        engine, cluster, slurm,
        lambda: Remediation.objects.get(pk=run.pk).step_name == "wait_drained",
        60, "the spare to come in and the run to wait for the job",
    )  # fmt: skip
    run.refresh_from_db()
    spare = run.context["replacement"]
    nodes = {info.name: info for info in slurm.nodes()}
    assert "train" in nodes[spare].partitions, "capacity comes back at once"
    assert slurm.job(alice).state == "RUNNING", "the running job is not killed"
    assert holds.seen and all(held == (spare,) for _node, held in holds.seen)
    assert slurm.checks_holds() == [], "the hold is gone once the checks passed"
    reason = wait_for(
        lambda: (lambda r: r if "waiting for job" in r else None)(scontrol_reason(slurm, "gpu-02")),
        30,
        "sinfo -R to say what Medbay waits for",
    )
    at = timezone.localtime(request.requested_at)
    assert reason.startswith(
        f"medbay: Action:Replace [run {run.pk}]: waiting for job {alice} to end on gpu-02; "
    )
    assert reason.endswith(f" (root {at:%H:%M})"), "the admin's name and time stay readable"

    slurm.cancel_job(alice)  # the job ends by itself, as a researcher's would
    drive_until(
        engine, cluster, slurm,
        lambda: Remediation.objects.get(pk=run.pk).status not in ACTIVE,
        60, "the run to end",
    )  # fmt: skip
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.message
    sync_once(cluster, slurm)
    final = scontrol_reason(slurm, "gpu-02")
    assert final.startswith(f"medbay: Action:Replace [run {run.pk}]: succeeded"), final
    info = {i.name: i for i in slurm.nodes()}["gpu-02"]
    assert info.flags & {"drain", "fail"}, "a replaced node stays out of service"


def test_state_down_replaces_at_once_and_the_researcher_reads_the_admins_request(slurm, cluster):
    alice, _bob = two_node_jobs(slurm)
    sync_once(cluster, slurm)
    scontrol(slurm, "update", "nodename=gpu-02", "state=down", "reason=Action:Replace dead PSU")
    wait_for(lambda: slurm.job(alice).state != "RUNNING", 30, "Slurm to end the job")
    sync_once(cluster, slurm)
    run = Remediation.objects.get()
    assert run.planned_steps == list(REPLACE_AFTER_DOWN)
    assert run.context.get("requeued") == [alice], "the job Slurm requeued, to release early"

    engine = Engine("requests", backend=slurm, fleet=SlurmSparesFleet(slurm))
    drive_until(
        engine, cluster, slurm,
        lambda: Remediation.objects.get(pk=run.pk).status not in ACTIVE,
        90, "the run to end",
    )  # fmt: skip
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.message
    job = wait_for(
        lambda: (lambda j: j if j.state == "RUNNING" else None)(slurm.job(alice)),
        30,
        "alice's job to run again",
    )
    assert "gpu-02" not in job.nodes and run.context["replacement"] in job.nodes
    sync_once(cluster, slurm)
    story = build_timeline(Job.objects.get(cluster=cluster, slurm_id=alice))
    why = [restart.sentence for restart in story.restarts]
    assert why and "root took gpu-02 down in Slurm (Action:Replace dead PSU)" in why[0], why


def test_a_withdrawn_request_cancels_its_run(slurm, cluster, settings):
    settings.MEDBAY_SLURM_REASON_ACTIONS = {"Action:Drain": "drain/approval"}
    scontrol(slurm, "update", "nodename=gpu-03", "state=drain", "reason=Action:Drain")
    sync_once(cluster, slurm)
    run = Remediation.objects.get()
    assert run.status == RunStatus.AWAITING_APPROVAL
    sync_once(cluster, slurm)
    assert "awaiting an admin's approval" in sinfo_reasons(slurm)["gpu-03"]

    scontrol(slurm, "update", "nodename=gpu-03", "state=resume")
    sync_once(cluster, slurm)
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert run.message == "request withdrawn in Slurm: gpu-03 was resumed before the run acted"


def test_a_refused_request_says_why_in_sinfo(slurm, cluster):
    scontrol(slurm, "update", "nodename=gpu-03", "state=drain", "reason=Action:Frobnicate")
    scontrol(slurm, "update", "nodename=gpu-06", "state=fail", "reason=Action:Replace")
    sync_once(cluster, slurm)
    sync_once(cluster, slurm)
    assert not Remediation.objects.exists()
    reasons = sinfo_reasons(slurm)
    assert reasons["gpu-03"].startswith(
        "medbay: refused Action:Frobnicate: unknown request word; Medbay knows Action:Replace"
    )
    assert reasons["gpu-06"].startswith(
        "medbay: refused Action:Replace: gpu-06 is a spare, in no pool in service"
    )


def test_a_hold_no_run_names_is_released(slurm, cluster):
    slurm.hold_for_checks("gpu-07")  # as an engine killed mid-check would leave it
    assert slurm.checks_holds() == ["gpu-07"]
    engine = Engine("sweeper", backend=slurm, fleet=SlurmSparesFleet(slurm))
    assert engine.release_stranded_holds() == ["gpu-07"]
    assert slurm.checks_holds() == []
