"""Medbay's accounting report agrees with Slurm's own sreport on a real cluster.

Alice (team vision) and Bob (team nlp) run real sbatch jobs on the accounting
cluster, one of Alice's is requeued; `manage.py import_accounting` reads them
from slurmdbd; then the report's GPU-seconds per account, per user and per
partition are compared with `sreport job SizesByAccount -T gres/gpu` for the
same days, and per QOS with `sacct --truncate` (sreport has no QOS filter).
"""

from __future__ import annotations

import os
import subprocess
from collections import defaultdict
from datetime import date, datetime, time, timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from clusters.backends import registry
from clusters.backends.slurm import SlurmBackend
from clusters.backends.slurm_parsers import tres_gpus
from jobs.models import AccountingJob
from portal.reports.accounting import usage
from portal.reports.params import ReportQuery
from tests.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.integration, pytest.mark.django_db]

FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


def slurm_env(cluster_env: dict[str, str]) -> dict[str, str]:
    # sreport and sacct read and print times in the local zone: make it the portal's.
    return {
        **os.environ,
        "SLURM_CONF": cluster_env["SLURM_CONF"],
        "TZ": timezone.get_current_timezone_name(),
    }


def run(args, env, user=None) -> str:
    if user:
        args = ["runuser", "-u", user, "--", *args]
    completed = subprocess.run(
        args, capture_output=True, text=True, env=env, timeout=60, cwd="/tmp"
    )
    assert completed.returncode == 0, f"{args}: {completed.stdout}{completed.stderr}"
    return completed.stdout.strip()


def submit(env, user, *options) -> int:
    return int(
        run(["sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", *options], env, user)
    )


def states(env, job_ids) -> dict[int, set[str]]:
    """Each job's attempt states as slurmdbd has them (sacct -D)."""
    out = run(
        [
            "sacct",
            "-n",
            "-P",
            "-X",
            "-D",
            "-o",
            "JobIDRaw,State",
            "-j",
            ",".join(map(str, job_ids)),
        ],
        env,
    )
    seen: dict[int, set[str]] = defaultdict(set)
    for line in out.splitlines():
        job_id, _, state = line.partition("|")
        seen[int(job_id)].add(state.split()[0])
    return seen


def sreport_gpu_seconds(env, start: date, end: date, *filters: str) -> dict[str, int]:
    """GPU-seconds per account from `sreport job SizesByAccount`, every size in one column."""
    out = run(
        [
            "sreport", "-n", "-P", "-T", "gres/gpu", "-t", "seconds", "job", "SizesByAccount",
            f"start={start.isoformat()}T00:00:00",
            f"end={(end + timedelta(days=1)).isoformat()}T00:00:00",
            "grouping=1000000", "FlatView", *filters,
        ],
        env,
    )  # fmt: skip
    figures: dict[str, int] = defaultdict(int)
    for line in out.splitlines():
        cluster, account, *sizes, _share = line.split("|")
        figures[account] += sum(int(size) for size in sizes)
    return dict(figures)


def sacct_gpu_seconds_by_qos(env, start: date, end: date) -> dict[str, int]:
    after = (end + timedelta(days=1)).isoformat()
    out = run(
        [
            "sacct", "-n", "-P", "-X", "-D", "-a", "--truncate", "-o", "QOS,ElapsedRaw,AllocTRES",
            "-S", f"{start.isoformat()}T00:00:00", "-E", f"{after}T00:00:00",
        ],
        env,
    )  # fmt: skip
    figures: dict[str, int] = defaultdict(int)
    for line in out.splitlines():
        qos, elapsed, tres = line.split("|")
        figures[qos] += int(elapsed or 0) * (tres_gpus(tres) or 0)
    return {qos: seconds for qos, seconds in figures.items() if seconds}


def medbay_gpu_seconds(start: date, end: date, group: str) -> dict[str, int]:
    report = usage(ReportQuery(start, end, bucket="day", group=group))
    return {row["group"]: row["gpu_s"] for row in report.table().rows if row["gpu_s"]}


@pytest.fixture
def accounting_backend(accounting_cluster):
    backend = SlurmBackend(accounting_cluster["SLURM_CONF"])
    registry.use(backend, fleet=object())
    yield backend
    registry.use(None)


def test_medbays_figures_match_sreport_for_alice_and_bob_on_the_real_cluster(
    accounting_cluster, accounting_backend, capsys
):
    env = slurm_env(accounting_cluster)
    first_day = timezone.localdate()
    jobs = {
        "alice_short": submit(env, "alice", "--gres=gpu:2", "--wrap=sleep 2"),
        "alice_requeued": submit(env, "alice", "-N2", "--gres=gpu:4", "--requeue",
                                 "--wrap=sleep 6"),
        "bob_fails": submit(env, "bob", "-p", "infer", "--qos=high", "--gres=gpu:1",
                            "--wrap=sleep 2; exit 3"),
        "bob_wide": submit(env, "bob", "--gres=gpu:8", "--wrap=sleep 3"),
    }  # fmt: skip
    requeued = jobs["alice_requeued"]
    wait_for(
        lambda: "RUNNING" in run(["squeue", "-h", "-o", "%T", "-j", str(requeued)], env),
        what=f"job {requeued} running",
    )
    run(["scontrol", "requeue", str(requeued)], env)

    def all_finished():
        seen = states(env, jobs.values())
        return all(seen.get(job_id, set()) & FINAL for job_id in jobs.values()) and (
            "REQUEUED" in seen.get(requeued, set())
        )

    wait_for(all_finished, timeout_s=90, what="every job finished in slurmdbd", interval_s=1,
             explain=lambda: dict(states(env, jobs.values())))  # fmt: skip
    last_day = timezone.localdate()

    since = timezone.make_aware(datetime.combine(first_day, time.min))
    call_command("import_accounting", "--since", since.isoformat())
    assert "matched" in capsys.readouterr().out

    alice = AccountingJob.objects.filter(slurm_id=requeued).order_by("submit_at")
    assert [record.state for record in alice] == ["REQUEUED", "COMPLETED"]
    assert alice.last().restarts == 1 and alice.last().account == "vision"
    assert AccountingJob.objects.get(slurm_id=jobs["bob_fails"]).qos == "high"

    expected = sreport_gpu_seconds(env, first_day, last_day)
    # At least this run's jobs: 2 GPUs x 2 s for Alice, 8 x 3 s + 1 x 2 s for Bob.
    assert expected["vision"] >= 4 and expected["nlp"] >= 26, expected
    print("sreport GPU-seconds by account:", expected)
    assert medbay_gpu_seconds(first_day, last_day, "account") == expected
    for user in ("alice", "bob"):
        assert medbay_gpu_seconds(first_day, last_day, "user")[user] == sum(
            sreport_gpu_seconds(env, first_day, last_day, f"users={user}").values()
        )
    for partition in ("train", "infer"):
        assert medbay_gpu_seconds(first_day, last_day, "partition")[partition] == sum(
            sreport_gpu_seconds(env, first_day, last_day, f"partitions={partition}").values()
        )
    assert medbay_gpu_seconds(first_day, last_day, "qos") == sacct_gpu_seconds_by_qos(
        env, first_day, last_day
    )

    # Importing again stores nothing twice.
    before = AccountingJob.objects.count()
    call_command("import_accounting", "--since", since.isoformat())
    assert AccountingJob.objects.count() == before
