"""Time from an XID 79 to the job running again, on the real local Slurm.

    python bench/recovery.py [--grace 10] [--slurm 22.05|24.11|26.05]

Needs the minicluster (SLURM_CONF set, or deploy/minicluster/up is run; with
--slurm, `up --slurm V` is always run and its clients put first on PATH). A
2-node checkpointing job runs on gpu-01/02 beside a job filling gpu-03/04; the
kernel line of an XID 79 on gpu-02 goes through the agent's parser, ingestion,
the XID 79 policy and the engine (SlurmBackend + SlurmSparesFleet). The floor is
a bare `scontrol requeue` of the same job until it runs again, measured in the
same run; overhead = xid_to_running - grace - floor.

Prints {"grace_s", "xid_to_drain_s", "xid_to_requeue_s", "xid_to_running_s",
"slurm_requeue_floor_s", "overhead_s", "resumed_from_step", "slurm_version"}.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The example researchers copy, with a run long enough to outlast the recovery.
TRAIN = (ROOT / "examples" / "checkpoint_job.sbatch").read_text()
TRAIN_ENV = {"TRAIN_STEPS": "10000000", "SAVE_EVERY": "1000000"}
SLURM_VERSIONS = ("22.05", "24.11", "26.05")
FILLER = """#!/bin/bash
#SBATCH --job-name=bench-filler
#SBATCH --partition=train
#SBATCH --nodes=2
#SBATCH --gres=gpu:8
#SBATCH --output=/dev/null
sleep 3600
"""


def ensure_slurm(version: str | None) -> None:
    """Starts (or finds) the minicluster; a named version is always asked of `up`,
    since a SLURM_CONF already set may be another version's cluster."""
    if os.environ.get("SLURM_CONF") and not version:
        return
    command = [str(ROOT / "deploy" / "minicluster" / "up")]
    if version:
        command += ["--slurm", version]
    # Building a version's Debian root the first time takes about a minute.
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise SystemExit(f"recovery bench: {' '.join(command[1:]) or 'up'} failed:\n{done.stderr}")
    for line in done.stdout.splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line.removeprefix("export ").partition("=")
            # 24.11 and 26.05 print PATH=<state>/bin:$PATH (that version's clients).
            value = value.strip().replace("$PATH", os.environ.get("PATH", ""))
            os.environ[key.strip()] = value


def wait_for(predicate, timeout_s: float, what: str, poll_s: float = 0.05):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll_s)
    raise SystemExit(f"recovery bench: timed out waiting for {what}")


def submit(slurm, script: str, user: str, folder: Path, env: dict | None = None) -> int:
    from clusters.backends.base import JobSubmission

    submission = JobSubmission(script=script, user=user, workdir=str(folder), extra_env=env or {})
    return slurm.submit_job(submission)


def running(slurm, job_id: int) -> bool:
    return slurm.job(job_id).state == "RUNNING"


def clean_up(slurm) -> None:
    for job in slurm.jobs():
        if job.state in ("PENDING", "RUNNING", "CONFIGURING", "SUSPENDED"):
            slurm.cancel_job(job.job_id)
    wait_for(
        lambda: not [j for j in slurm.jobs() if j.state in ("PENDING", "RUNNING", "COMPLETING")],
        30,
        "an empty queue",
        0.2,
    )
    for node in slurm.nodes():
        if node.reason.startswith("medbay:"):
            slurm.resume_node(node.name)
    configured = slurm.configured_partitions()
    for partition in slurm.partitions():
        if partition.name in configured and partition.nodes != configured[partition.name]:
            slurm.set_partition_nodes(partition.name, configured[partition.name])


def measure_floor(slurm, folder: Path) -> float:
    """A bare `scontrol requeue` of a running job until Slurm runs it again."""
    job_id = submit(slurm, TRAIN, "alice", folder, TRAIN_ENV)
    wait_for(lambda: running(slurm, job_id), 60, "the floor job to start")
    time.sleep(1)
    started = time.monotonic()
    slurm.requeue_job(job_id)
    wait_for(lambda: slurm.job(job_id).state == "PENDING", 30, "the requeue")
    wait_for(lambda: running(slurm, job_id), 300, "the floor job to run again")
    floor = time.monotonic() - started
    clean_up(slurm)
    return floor


def kernel_line(pci: str) -> list[dict]:
    from django.utils import timezone

    stamp = timezone.now().strftime("%b %d %H:%M:%S")
    line = f"{stamp} gpu-02 kernel: NVRM: Xid (PCI:{pci}): 79, pid='<unknown>', name=<unknown>, "
    log = Path(tempfile.mkstemp(prefix="medbay-kmsg-")[1])
    log.write_text(line + "GPU has fallen off the bus.\n")
    parsed = subprocess.run(
        [sys.executable, "-m", "agent.cli", "parse", "--kmsg", str(log), "--node", "gpu-02"],
        capture_output=True, text=True, check=True, cwd=ROOT, env={**os.environ, "TZ": "UTC"},
    )  # fmt: skip
    log.unlink()
    return [json.loads(row) for row in parsed.stdout.splitlines() if row.strip()]


def measure_recovery(slurm, folder: Path, grace: int) -> dict:
    from clusters.backends.slurm_spares import SlurmSparesFleet
    from clusters.models import Cluster, Gpu, Node, Partition
    from health.ingest import ingest, validate_batch
    from remediation.engine import Engine
    from remediation.models import Remediation
    from sync.cycle import sync_once

    Cluster.objects.filter(name="bench-recovery").delete()
    cluster = Cluster.objects.create(name="bench-recovery", backend="slurm")
    job_id = submit(slurm, TRAIN, "alice", folder, TRAIN_ENV)
    wait_for(lambda: running(slurm, job_id), 60, "the job to start")
    filler = submit(slurm, FILLER, "bob", folder)
    wait_for(lambda: running(slurm, filler), 60, "the filler job to start")
    sync_once(cluster, slurm)
    Partition.objects.filter(cluster=cluster, name="train").update(checkpoint_grace_s=grace)
    gpu_02 = Node.objects.get(cluster=cluster, name="gpu-02")
    events = kernel_line(Gpu.objects.get(node=gpu_02, index=3).pci_bus_id)
    time.sleep(1)
    engine = Engine("bench", backend=slurm, fleet=SlurmSparesFleet(slurm))
    t0 = time.monotonic()
    ingest(gpu_02, validate_batch({"node": "gpu-02", "events": events}).events)
    marks: dict[str, float] = {}

    def progress():
        engine.run_once()
        now = time.monotonic() - t0
        node = next(n for n in slurm.nodes() if n.name == "gpu-02")
        if "drain" in node.flags or "fail" in node.flags:
            marks.setdefault("drain", now)
        job = slurm.job(job_id)
        if job.restart_count >= 1:
            marks.setdefault("requeue", now)
            if job.state == "RUNNING":
                marks.setdefault("running", now)
        return "running" in marks

    wait_for(progress, 300, "the job to run again", poll_s=0.05)
    run = Remediation.objects.filter(node=gpu_02).latest("id")
    text = wait_for(
        lambda: (lambda t: t if "resumed from step" in t else None)(
            (folder / "train.out").read_text()
        ),
        60,
        "the job to resume",
    )
    wait_for(lambda: (engine.run_once() or True) and _finished(run), 60, "the run to finish")
    return {
        "drain": marks["drain"],
        "requeue": marks["requeue"],
        "running": marks["running"],
        "resumed": int(re.search(r"resumed from step (\d+)", text).group(1)),
    }


def slurm_version() -> str:
    """What the clients say (`slurm-wlm 26.05.5` -> `26.05.5`), measured, not the flag."""
    done = subprocess.run(["sinfo", "--version"], capture_output=True, text=True, check=False)
    return done.stdout.split()[-1] if done.stdout.split() else "unknown"


def _finished(run) -> bool:
    run.refresh_from_db()
    return run.status in ("succeeded", "failed", "needs_attention", "cancelled")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--grace", type=int, default=10)
    parser.add_argument(
        "--slurm",
        choices=SLURM_VERSIONS,
        help="run on this Slurm's minicluster (deploy/minicluster/up --slurm V)",
    )
    args = parser.parse_args()
    ensure_slurm(args.slurm)
    database = tempfile.mkdtemp(prefix="medbay-bench-recovery-")
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{database}/recovery.sqlite3")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _setup import django_setup

    django_setup()
    from clusters.backends.slurm import SlurmBackend

    slurm = SlurmBackend(os.environ["SLURM_CONF"])
    folder = Path(tempfile.mkdtemp(prefix="medbay-bench-", dir="/tmp"))
    folder.chmod(0o777)
    for name in ("checkpoint_loop.py", "checkpointing.py"):  # the trainer and its helper
        shutil.copy(ROOT / "examples" / name, folder / name)
    try:
        clean_up(slurm)
        floor = measure_floor(slurm, folder)
        shutil.rmtree(folder / "checkpoints", ignore_errors=True)
        (folder / "train.out").unlink(missing_ok=True)
        marks = measure_recovery(slurm, folder, args.grace)
    finally:
        clean_up(slurm)
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(database, ignore_errors=True)
    print(
        json.dumps(
            {
                "grace_s": args.grace,
                "xid_to_drain_s": round(marks["drain"], 2),
                "xid_to_requeue_s": round(marks["requeue"], 2),
                "xid_to_running_s": round(marks["running"], 2),
                "slurm_requeue_floor_s": round(floor, 2),
                "overhead_s": round(marks["running"] - args.grace - floor, 2),
                "resumed_from_step": marks["resumed"],
                "slurm_version": slurm_version(),
            }
        )
    )


if __name__ == "__main__":
    main()
