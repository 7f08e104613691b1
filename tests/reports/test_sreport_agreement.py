"""Medbay's accounting report agrees with Slurm's own sreport on a real cluster.

Alice (team vision) and Bob (team nlp) run real sbatch jobs on the accounting
cluster, one of Alice's is requeued; `manage.py import_accounting` reads them
from slurmdbd; then the report's GPU-seconds per account, per user and per
partition are compared with `sreport job SizesByAccount -T gres/gpu` for the
window sreport reports on, and per QOS with `sacct --truncate` for that window
(sreport has no QOS filter).

sreport works in whole hours and does not go past the hour it counts as done
(measured on 22.05: at 20:11, `end=` anything later gave a window ending
19:59:59, while a start inside the current hour gave 20:00:00-20:59:59), so the
test asks from the hour its jobs started in and compares the window sreport
prints in its header.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections import defaultdict
from datetime import datetime, time, timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from clusters.backends import registry
from clusters.backends.slurm import SlurmBackend
from clusters.backends.slurm_parsers import tres_gpus
from jobs.models import AccountingJob
from reports.accounting import usage_rows
from reports.intervals import Span
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


WINDOW = re.compile(r"^Job Sizes (\S+) - (\S+) \(")


def parse_local(text: str) -> datetime:
    return timezone.make_aware(datetime.fromisoformat(text))


def sreport_gpu_seconds(env, start: datetime, *filters: str):
    """GPU-seconds per account from `sreport job SizesByAccount`, every size in one column,
    and the window sreport used: it works in whole hours and ends at the last hour it
    counts as done, so it says which window its figures are for."""
    end = start + timedelta(days=1)  # sreport stops it at the last hour it counts as done
    out = run(
        [
            "sreport", "-P", "-T", "gres/gpu", "-t", "seconds", "job", "SizesByAccount",
            f"start={start:%Y-%m-%dT%H:%M:%S}", f"end={end:%Y-%m-%dT%H:%M:%S}",
            "grouping=1000000", "FlatView", *filters,
        ],
        env,
    )  # fmt: skip
    window, figures = None, defaultdict(int)
    for line in out.splitlines():
        if match := WINDOW.match(line):
            # The end is printed inclusive, to the second.
            window = (parse_local(match[1]), parse_local(match[2]) + timedelta(seconds=1))
        elif line.startswith("medbay|"):
            _cluster, account, *sizes, _share = line.split("|")
            figures[account] += sum(int(size) for size in sizes)
    assert window, out
    return window, dict(figures)


def sacct_gpu_seconds_by_qos(env, window) -> dict[str, int]:
    start, end = window
    out = run(
        [
            "sacct", "-n", "-P", "-X", "-D", "-a", "--truncate", "-o", "QOS,ElapsedRaw,AllocTRES",
            "-S", f"{start:%Y-%m-%dT%H:%M:%S}", "-E", f"{end:%Y-%m-%dT%H:%M:%S}",
        ],
        env,
    )  # fmt: skip
    figures: dict[str, int] = defaultdict(int)
    for line in out.splitlines():
        qos, elapsed, tres = line.split("|")
        figures[qos] += int(elapsed or 0) * (tres_gpus(tres) or 0)
    return {qos: seconds for qos, seconds in figures.items() if seconds}


def medbay_gpu_seconds(window, group: str) -> dict[str, int]:
    """The accounting report's own sums (usage_rows) for exactly that window."""
    start, end = window
    span = Span(start=start, end=end, data_end=min(end, timezone.now()), bucket=timedelta(days=1))
    return {row[group]: round(row["used"]) for row in usage_rows(span, group) if row["used"]}


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
    first_submit = timezone.now()
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
    since = timezone.make_aware(datetime.combine(timezone.localdate(first_submit), time.min))
    call_command("import_accounting", "--since", since.isoformat())
    assert "matched" in capsys.readouterr().out

    alice = AccountingJob.objects.filter(slurm_id=requeued).order_by("submit_at")
    assert [record.state for record in alice] == ["REQUEUED", "COMPLETED"]
    assert alice.last().restarts == 1 and alice.last().account == "vision"
    assert AccountingJob.objects.get(slurm_id=jobs["bob_fails"]).qos == "high"

    # sreport counts whole hours: from the hour these jobs started in.
    hour = first_submit.astimezone(timezone.get_current_timezone()).replace(
        minute=0, second=0, microsecond=0
    )
    window, expected = sreport_gpu_seconds(env, hour)
    # This run's jobs at least (2 GPUs x 2 s for Alice, 8 x 3 s + 1 x 2 s for Bob, less
    # whatever fell past the hour when the run straddled one).
    assert expected.get("vision", 0) > 0 and expected.get("nlp", 0) > 0, (window, expected)
    print("sreport GPU-seconds by account for", window, expected)
    assert medbay_gpu_seconds(window, "account") == expected
    for user in ("alice", "bob"):
        _, theirs = sreport_gpu_seconds(env, hour, f"users={user}")
        assert medbay_gpu_seconds(window, "user")[user] == sum(theirs.values())
    for partition in ("train", "infer"):
        _, theirs = sreport_gpu_seconds(env, hour, f"partitions={partition}")
        assert medbay_gpu_seconds(window, "partition")[partition] == sum(theirs.values())
    assert medbay_gpu_seconds(window, "qos") == sacct_gpu_seconds_by_qos(env, window)

    # Importing again stores nothing twice.
    before = AccountingJob.objects.count()
    call_command("import_accounting", "--since", since.isoformat())
    assert AccountingJob.objects.count() == before
