"""ETTR and badput by cause, per job, per account and for the cluster (jobs/ettr.py)."""

from __future__ import annotations

from collections import defaultdict

from django.db.models import Q

from jobs.ettr import CAUSES, JobEttr, ettr_for_jobs
from jobs.models import Job
from portal.reports.base import NO_DATA, Report, Table, hours, percent
from portal.reports.params import ReportQuery

TOP_JOBS = 50
LABELS = {
    "lost_progress": "lost progress",
    "detection": "detection",
    "checkpoint_grace": "checkpoint grace",
    "node_replacement": "node replacement",
    "queue_after_requeue": "queue after requeue",
    "restore": "restore",
}
HELP = [
    'ETTR (Effective Training Time Ratio; Meta, "Revisiting Reliability in Large-Scale ML '
    "Research Clusters\", HPCA 2025): productive time / wall-clock time from the job's first "
    "start to its end, weighted by GPUs when summed. Badput is the rest, split by cause as "
    "Google's ML Productivity Goodput splits lost time (Google Cloud, \"ML Productivity "
    'Goodput", 2024), with terms that do not overlap:',
    "lost progress: work since the last checkpoint, redone (last checkpoint, or the "
    "attempt's start, to the fault or the stop); detection: the fault (the incident's first "
    "event) to the node's drain; checkpoint grace: the drain to the requeue; node "
    "replacement: the remediation's replace step while the job waited; queue after "
    "requeue: the rest of the wait from the requeue to running again; restore: running "
    "again to the first progress report; other: wall-clock time none of these explain.",
    "Source: Medbay's own records (job state history, remediation runs and steps, "
    "incidents, progress reports), for jobs that ended in the range or are still active. "
    "A job that never reported progress has its lost progress counted as the whole "
    "attempt and its restore as zero: the estimates column names such terms.",
]


def _jobs(query: ReportQuery):
    span = query.span()
    ended = Q(end_at__gte=span.start, end_at__lt=span.data_end)
    active = Q(end_at__isnull=True, updated_at__gte=span.start)
    # Only what jobs/ettr.py and the tables read: a year is tens of thousands of jobs.
    return (
        Job.objects.filter(ended | active)
        .filter(start_at__isnull=False, gpus__gt=0)
        .only(*JOB_FIELDS)
    )


JOB_FIELDS = (
    "id", "cluster_id", "slurm_id", "account", "user", "gpus", "restart_count", "submit_at",
    "start_at", "end_at",
)  # fmt: skip


def _gpu_h(measured: JobEttr, seconds: float) -> float:
    return measured.job.gpus * seconds


def _row(measured: list[JobEttr]) -> dict:
    """GPU-weighted sums over MEASURED, in one pass (a year holds tens of thousands)."""
    wall = productive = other = 0.0
    causes = dict.fromkeys(CAUSES, 0.0)
    estimated: set[str] = set()
    for item in measured:
        gpus, kept = item.job.gpus, item.productive_s
        wall += gpus * item.wall_s
        productive += gpus * kept
        lost = 0.0
        for cause, seconds in item.badput.items():
            if seconds:
                causes[cause] += gpus * seconds
                lost += seconds
        other += gpus * max(0.0, item.wall_s - kept - lost)
        estimated |= item.estimated
    # A job that has only just started has no wall clock yet to take a ratio of.
    row = {"ettr_pct": percent(productive, wall) if wall else None}
    row["productive_gpu_h"] = hours(productive)
    row.update({f"{cause}_gpu_h": hours(causes[cause]) for cause in CAUSES})
    row["other_gpu_h"] = hours(other)
    row["estimates"] = ", ".join(sorted(LABELS[term] for term in estimated))
    return row


def _columns() -> list[tuple[str, str]]:
    return [
        ("ettr_pct", "ETTR %"),
        ("productive_gpu_h", "productive GPU-h"),
        *((f"{cause}_gpu_h", f"{LABELS[cause]} GPU-h") for cause in CAUSES),
        ("other_gpu_h", "other GPU-h"),
        ("estimates", "estimated terms"),
    ]


def ettr(query: ReportQuery) -> Report:
    measured = ettr_for_jobs(_jobs(query))
    report = Report("ettr", "ETTR and badput by cause", query)
    accounts: dict[str, list[JobEttr]] = defaultdict(list)
    for item in measured:
        accounts[item.job.account].append(item)
    by_account = Table(
        "by_account", "ETTR by account", [("account", "account"), ("jobs", "jobs"), *_columns()]
    )
    for account in sorted(accounts, key=lambda name: (-len(accounts[name]), name)):
        by_account.rows.append(
            {"account": account, "jobs": len(accounts[account]), **_row(accounts[account])}
        )
    by_job = Table(
        "by_job",
        f"The {TOP_JOBS} jobs with the most badput",
        [("job", "job"), ("account", "account"), ("user", "user"), ("gpus", "GPUs"),
         ("restarts", "restarts"), ("wall_h", "wall-clock h"), *_columns()],
    )  # fmt: skip
    worst = sorted(measured, key=lambda m: -_gpu_h(m, m.wall_s - m.productive_s))[:TOP_JOBS]
    for item in worst:
        job = item.job
        by_job.rows.append(
            {"job": job.slurm_id, "account": job.account, "user": job.user, "gpus": job.gpus,
             "restarts": job.restart_count, "wall_h": hours(item.wall_s), **_row([item])}
        )  # fmt: skip
    report.tables = [by_account, by_job]
    cluster = _row(measured)
    report.summary = {
        "cluster ETTR %": cluster["ettr_pct"],
        "jobs": len(measured),
        **{f"{LABELS[cause]} GPU-h": cluster[f"{cause}_gpu_h"] for cause in CAUSES},
    }
    report.notes += HELP
    if not measured:
        report.message = NO_DATA
    return report
