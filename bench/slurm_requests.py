"""Time from an admin's `scontrol ... reason="Action:Replace"` to Medbay's run, on the
real local Slurm.

    python bench/slurm_requests.py [--requests 5] [--interval 2] [--slurm 22.05|24.11|26.05]

Needs the minicluster (SLURM_CONF set, or deploy/minicluster/up is run). The sync
loop (at --interval, as `serve` runs it) and one engine worker run in threads, as in
production. Each request fails a training node with `Action:Replace` while a job runs
on it; the benchmark measures, from the moment `scontrol` returns, the time until the
run exists (goal: within one sync interval plus 1 s) and until a spare is in the
node's partition. Between requests the cluster is put back as slurm.conf has it. The
breaker's rate limit is raised for the run: five replaces within minutes are what it
exists to stop.

Prints {"requests", "sync_interval_s", "scontrol_to_run_p50_s", "scontrol_to_run_max_s",
"scontrol_to_spare_p50_s", "scontrol_to_spare_max_s", "goal_s", "slurm_version"}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recovery import SLURM_VERSIONS, clean_up, ensure_slurm, slurm_version, wait_for  # noqa: E402

JOB = """#!/bin/bash
#SBATCH --job-name=bench-request
#SBATCH --output=/dev/null
#SBATCH --partition=train
#SBATCH --nodes=1
#SBATCH --gres=gpu:8
#SBATCH --nodelist={node}
sleep 600
"""
NODES = ("gpu-01", "gpu-02", "gpu-03", "gpu-04")


def put_back(slurm) -> None:
    """slurm.conf's cluster again: no job, no failed node, no hold of Medbay's."""
    clean_up(slurm)
    for node in slurm.checks_holds():
        slurm.release_checks_hold(node)
    deadline = time.monotonic() + 90
    while busy := [f"{n.name} {n.state} {sorted(n.flags)}" for n in slurm.nodes()
                   if n.state != "idle" or n.flags]:  # fmt: skip
        if time.monotonic() > deadline:
            raise SystemExit(f"slurm_requests bench: nodes not idle: {', '.join(busy)}")
        for node in slurm.nodes():  # a node still completing is resumed once it is done
            if node.flags & {"drain", "fail"} or node.state == "down":
                slurm.resume_node(node.name)
        time.sleep(0.5)


def one_request(slurm, node: str) -> tuple[float, float]:
    from clusters.backends.base import JobSubmission
    from remediation.models import Remediation, SlurmRequest

    job = slurm.submit_job(JobSubmission(script=JOB.format(node=node), user="alice"))
    wait_for(lambda: slurm.job(job).state == "RUNNING", 60, f"the job on {node}")
    before = set(Remediation.objects.values_list("pk", flat=True))
    subprocess.run(
        ["scontrol", "update", f"nodename={node}", "state=fail", "reason=Action:Replace bench"],
        check=True,
        capture_output=True,
    )
    asked = time.monotonic()
    deadline = asked + 60
    while (
        run := Remediation.objects.exclude(pk__in=before).filter(node__name=node).first()
    ) is None:
        if time.monotonic() > deadline:
            seen = list(SlurmRequest.objects.filter(node__name=node).values_list("text", "refusal"))
            info = [(n.state, sorted(n.flags), n.reason) for n in slurm.nodes() if n.name == node]
            raise SystemExit(f"slurm_requests bench: no run for {node}; requests {seen}; {info}")
        time.sleep(0.02)
    to_run = time.monotonic() - asked

    def spare_in():
        members = {p.name: p.nodes for p in slurm.partitions()}["train"]
        return any(name not in NODES for name in members)

    wait_for(spare_in, 120, f"a spare in {node}'s partition", 0.05)
    to_spare = time.monotonic() - asked
    wait_for(lambda: Remediation.objects.get(pk=run.pk).step_name == "wait_drained", 60, "wait")
    slurm.cancel_job(job)
    wait_for(
        lambda: Remediation.objects.get(pk=run.pk).status in ("succeeded", "failed"),
        120,
        "the run to end",
        0.1,
    )
    return to_run, to_spare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--slurm", choices=SLURM_VERSIONS)
    args = parser.parse_args()
    ensure_slurm(args.slurm)
    database = tempfile.mkdtemp(prefix="medbay-bench-requests-")
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{database}/requests.sqlite3")
    # Five replaces in a few minutes are what the breaker exists to stop (4 nodes in 10
    # minutes): this measures the path from scontrol to the run, not the breaker.
    os.environ.setdefault("MEDBAY_BREAKER_MAX_NODES", "100")
    from _setup import django_setup

    django_setup()
    from clusters.backends.slurm import SlurmBackend
    from clusters.backends.slurm_spares import SlurmSparesFleet
    from clusters.models import Cluster
    from remediation.engine import Engine
    from sync.loop import SyncLoop

    slurm = SlurmBackend(os.environ["SLURM_CONF"])
    put_back(slurm)
    cluster = Cluster.objects.create(name="bench", backend="slurm")
    loop = SyncLoop(cluster, slurm, interval_s=args.interval)
    stop = threading.Event()
    engine = Engine("bench", backend=slurm, fleet=SlurmSparesFleet(slurm))
    threads = [
        loop.start(),
        threading.Thread(target=engine.run_forever, kwargs={"interval": 0.2, "stop": stop}),
    ]
    threads[1].start()
    to_run, to_spare = [], []
    try:
        for index in range(args.requests):
            node = NODES[index % len(NODES)]
            run_s, spare_s = one_request(slurm, node)
            to_run.append(run_s)
            to_spare.append(spare_s)
            put_back(slurm)
    finally:
        loop.stop()
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        put_back(slurm)
    print(
        json.dumps(
            {
                "requests": len(to_run),
                "sync_interval_s": args.interval,
                "scontrol_to_run_p50_s": round(statistics.median(to_run), 2),
                "scontrol_to_run_max_s": round(max(to_run), 2),
                "scontrol_to_spare_p50_s": round(statistics.median(to_spare), 2),
                "scontrol_to_spare_max_s": round(max(to_spare), 2),
                "goal_s": args.interval + 1,
                "slurm_version": slurm_version(),
            }
        )
    )


if __name__ == "__main__":
    main()
