"""The automatic recovery plan end to end on the real local Slurm.

A 2-node job that checkpoints on USR1 runs on gpu-01 and gpu-02; the kernel log
of gpu-02 reports XID 79; the agent's parser turns the line into an event,
ingestion opens an incident, the XID 79 policy starts an automatic replacement,
and the engine (SlurmBackend + SlurmSparesFleet, 10 s grace) drains, signals,
requeues, swaps in spare gpu-05 and releases the job, which resumes from its
checkpoint on the new node set.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from django.utils import timezone

from clusters.backends.base import JobSubmission
from clusters.backends.slurm_spares import SlurmSparesFleet
from clusters.models import Cluster, Gpu, Node, Partition
from health.ingest import ingest, validate_batch
from remediation.engine import Engine
from remediation.models import Remediation, StepOutcome
from remediation.transitions import ACTIVE, RunStatus
from sync.cycle import sync_once
from tests.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions, pytest.mark.django_db]

REPO = Path(__file__).resolve().parents[2]
GRACE_S = 10
TRAINING_SCRIPT = (REPO / "examples" / "checkpoint_job.sbatch").read_text()
BLOCKER_SCRIPT = """#!/bin/bash
#SBATCH --job-name=e2e-blocker
#SBATCH --output=/dev/null
#SBATCH --partition=train
#SBATCH --nodes=2
#SBATCH --gres=gpu:8
sleep 600
"""


@pytest.fixture
def folder():
    path = Path(tempfile.mkdtemp(prefix="medbay-e2e-", dir="/tmp"))
    path.chmod(0o777)  # the job runs as alice and writes its checkpoints here
    for name in ("checkpoint_loop.py", "checkpointing.py"):  # the trainer and its helper
        shutil.copy(REPO / "examples" / name, path / name)
        (path / name).chmod(0o644)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def job_state(slurm, job_id: int):
    return slurm.job(job_id)


def kernel_log_events(folder: Path, pci: str) -> list[dict]:
    """What the node agent parses out of gpu-02's kernel log (real parser, no network)."""
    stamp = timezone.now().strftime("%b %d %H:%M:%S")
    line = (
        f"{stamp} gpu-02 kernel: NVRM: Xid (PCI:{pci}): 79, pid='<unknown>', "
        "name=<unknown>, GPU has fallen off the bus.\n"
    )
    log = folder / "kern.log"
    log.write_text(line)
    parsed = subprocess.run(
        [sys.executable, "-m", "agent.cli", "parse", "--kmsg", str(log), "--node", "gpu-02"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env={**os.environ, "TZ": "UTC"},
    )
    return [json.loads(row) for row in parsed.stdout.splitlines() if row.strip()]


def test_an_xid_79_on_a_training_node_is_healed_by_a_spare_and_the_job_resumes(
    slurm, folder, django_capture_on_commit_callbacks
):
    cluster = Cluster.objects.create(name="minicluster", backend="slurm")
    sync_once(cluster, slurm)
    Partition.objects.filter(cluster=cluster, name="train").update(checkpoint_grace_s=GRACE_S)

    job_id = slurm.submit_job(
        JobSubmission(script=TRAINING_SCRIPT, user="alice", workdir=str(folder))
    )
    output = folder / "train.out"
    wait_for(lambda: job_state(slurm, job_id).state == "RUNNING", 30, "the job to start")
    assert job_state(slurm, job_id).nodes == ("gpu-01", "gpu-02")
    wait_for(lambda: output.exists() and "step=50 " in output.read_text(), 30, "training steps")
    blocker = slurm.submit_job(JobSubmission(script=BLOCKER_SCRIPT, user="bob"))
    wait_for(lambda: job_state(slurm, blocker).state == "RUNNING", 30, "gpu-03/04 to fill up")

    sync_once(cluster, slurm)
    gpu_02 = Node.objects.get(cluster=cluster, name="gpu-02")
    pci = Gpu.objects.get(node=gpu_02, index=3).pci_bus_id
    batch = validate_batch({"node": "gpu-02", "events": kernel_log_events(folder, pci)})
    with django_capture_on_commit_callbacks(execute=True):
        ingest(gpu_02, batch.events)
    run = Remediation.objects.get(node=gpu_02)
    assert (run.action, run.status) == ("replace", RunStatus.RUNNING)
    assert run.reason == "XID 79 GPU 3 fallen off the bus"

    engine = Engine("e2e", backend=slurm, fleet=SlurmSparesFleet(slurm))
    engine.advance(engine.claim())  # the drain
    drained = next(n for n in slurm.nodes() if n.name == "gpu-02")
    assert "drain" in drained.flags
    assert drained.reason == f"medbay: XID 79 GPU 3 fallen off the bus [run {run.pk}]"

    def finished():
        engine.run_once()
        sync_once(cluster, slurm)
        run.refresh_from_db()
        return run.status not in {str(s) for s in ACTIVE} or run.status == "needs_attention"

    wait_for(finished, 120, "the run to finish", interval_s=0.5)
    assert run.status == RunStatus.SUCCEEDED, run.message

    done = run.steps.filter(outcome__in=[StepOutcome.SUCCEEDED, StepOutcome.SKIPPED])
    assert list(done.values_list("index", flat=True)) == list(range(len(run.planned_steps)))
    assert list(done.values_list("name", flat=True)) == run.planned_steps
    grace = run.steps.get(name="wait_grace", outcome=StepOutcome.SUCCEEDED)
    requeue = run.steps.get(name="requeue_jobs")
    signal = run.steps.get(name="signal_jobs")
    assert (requeue.started_at - signal.finished_at).total_seconds() >= GRACE_S - 0.5
    assert grace.message == f"grace of {GRACE_S}s over"

    nodes = {info.name: info for info in slurm.nodes()}
    assert "fail" in nodes["gpu-02"].flags
    assert nodes["gpu-02"].reason == f"medbay: Action:Replace [run {run.pk}]"
    assert "train" in nodes["gpu-05"].partitions and "spare" not in nodes["gpu-05"].partitions
    assert "gpu-02" not in nodes["gpu-02"].partitions and not nodes["gpu-02"].partitions
    assert Node.objects.get(cluster=cluster, name="gpu-05").partition_names == "train"

    job = wait_for(
        lambda: (lambda j: j if j.state == "RUNNING" else None)(job_state(slurm, job_id)),
        30,
        "the job to run again",
    )
    assert job.restart_count >= 1
    assert job.nodes == ("gpu-01", "gpu-05")
    text = wait_for(
        lambda: (lambda t: t if "resumed from step" in t else None)(output.read_text()),
        30,
        "the job to resume",
    )
    saved_before = [int(s) for s in re.findall(r"checkpoint saved step=(\d+)", text)]
    resumed = int(re.search(r"resumed from step (\d+)", text).group(1))
    assert resumed > 0 and resumed in saved_before  # the USR1/TERM checkpoint, not step 0
    assert "attempt restart_count=1 nodes=gpu-[01,05]" in text
