"""ETTR and badput by cause, per job, per account and for the cluster (jobs/ettr.py)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, DateTimeField, DurationField, F, Q, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from clusters.models import Cluster
from jobs.ettr import CAUSES, JobEttr, ettr_for_jobs, restarted_accounting_jobs
from jobs.models import AccountingJob, Job, JobState
from reports.base import NO_DATA, Report, Table, hours, percent
from reports.goodput import lost_work
from reports.intervals import Span
from reports.params import ReportQuery

TOP_JOBS = 50
LABELS = {
    "lost_progress": "lost progress",
    "detection": "detection",
    "checkpoint_grace": "checkpoint grace",
    "node_replacement": "node replacement",
    "queue_after_requeue": "queue after requeue",
    "restore": "restore",
}
LOST_WORK_NOTE = (
    "Lost work and restore above are the Goodput report's figures: over the interruptions "
    "in the range, lost work from the later of the attempt's start and its last checkpoint "
    "to the stop (the tables' lost progress, detection and checkpoint grace together), "
    "restore from running again to the first progress report. The tables split the jobs "
    "that ended in the range over their whole life, and estimate what jobs that never "
    "reported progress lost (the estimates column names those terms)."
)
SOURCES = {"medbay": "Medbay", "accounting": "Slurm accounting"}
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
    "Jobs Medbay has no record of (from before it was installed) come from Slurm's "
    "accounting (import_accounting): each attempt's start and end give the running time "
    "and the queue wait after each requeue; each requeued attempt counts as lost progress "
    "(its detection and checkpoint grace are inside it: no accounting record separates "
    "them) and restore as zero, both named estimates. A job that never restarted counts "
    "whole as productive in its account and the cluster; the jobs table lists the jobs "
    "that lost time.",
]


@dataclass
class Totals:
    """GPU-weighted sums (GPU-seconds) over jobs, built in one pass over many."""

    jobs: int = 0
    wall: float = 0.0
    productive: float = 0.0
    other: float = 0.0
    causes: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0.0))
    estimated: set[str] = field(default_factory=set)

    def add(self, item: JobEttr) -> None:
        gpus, kept = item.job.gpus, item.productive_s
        self.jobs += 1
        self.wall += gpus * item.wall_s
        self.productive += gpus * kept
        lost = 0.0
        for cause, seconds in item.badput.items():
            if seconds:
                self.causes[cause] += gpus * seconds
                lost += seconds
        self.other += gpus * max(0.0, item.wall_s - kept - lost)
        self.estimated |= item.estimated

    def add_whole(self, jobs: int, gpu_seconds: float) -> None:
        """Jobs that never restarted: all their wall clock was productive."""
        self.jobs += jobs
        self.wall += gpu_seconds
        self.productive += gpu_seconds

    def row(self) -> dict:
        # A job that has only just started has no wall clock yet to take a ratio of.
        row = {"ettr_pct": percent(self.productive, self.wall) if self.wall else None}
        row["productive_gpu_h"] = hours(self.productive)
        row.update({f"{cause}_gpu_h": hours(self.causes[cause]) for cause in CAUSES})
        row["other_gpu_h"] = hours(self.other)
        row["estimates"] = ", ".join(sorted(LABELS[term] for term in self.estimated))
        return row


def _medbay_jobs(span: Span):
    ended = Q(end_at__gte=span.start, end_at__lt=span.data_end)
    active = Q(end_at__isnull=True, updated_at__gte=span.start)
    jobs = span.of_cluster(Job.objects, "cluster")
    return jobs.filter(ended | active).filter(start_at__isnull=False, gpus__gt=0)


JOB_FIELDS = (
    "id", "cluster_id", "slurm_id", "account", "user", "gpus", "restart_count", "submit_at",
    "start_at", "end_at",
)  # fmt: skip


def _never_restarted(span: Span, now: datetime) -> list[tuple[str, int, int, float]]:
    """(account, GPUs, jobs, wall seconds) of the jobs that never restarted, summed in the
    database: a year holds a million of them, and each is simply productive throughout."""
    running = Coalesce(F("end_at"), Value(now, output_field=DateTimeField())) - F("start_at")
    medbay = (
        _medbay_jobs(span)
        .filter(restart_count=0)
        .values("account", "gpus")
        .annotate(jobs=Count("id"), wall=Sum(running, output_field=DurationField()))
        .order_by()
    )
    accounting = (
        span.of_cluster(AccountingJob.objects, "cluster")
        .filter(
            job__isnull=True,
            restarts=0,
            start_at__isnull=False,
            gpus__gt=0,
            end_at__gte=span.start,
            end_at__lt=span.data_end,
        )
        .exclude(state=JobState.REQUEUED)
        .values("account", "gpus")
        .annotate(jobs=Count("id"), wall=Sum("elapsed_s"))
        .order_by()
    )
    rows = [
        (row["account"], row["gpus"], row["jobs"], row["wall"].total_seconds()) for row in medbay
    ]
    rows += [(row["account"], row["gpus"], row["jobs"], float(row["wall"])) for row in accounting]
    return rows


def _restarted(span: Span, now: datetime) -> list[JobEttr]:
    """Each restarted job's ETTR: Medbay's own story where it has one, else accounting's."""
    medbay = _medbay_jobs(span).filter(restart_count__gt=0).only(*JOB_FIELDS)
    # Only the accounting records of jobs Medbay has no row of, so no job counts twice.
    return [
        *ettr_for_jobs(medbay, now=now),
        *restarted_accounting_jobs(span.start, span.data_end, cluster_id=span.cluster_id),
    ]


def _job_label(span: Span):
    """A job's Slurm id, or "cluster/id" where the span combines clusters (each numbers
    its own jobs)."""
    if not span.qualified:
        return lambda job: job.slurm_id
    names = dict(Cluster.objects.values_list("pk", "name"))
    return lambda job: f"{names[job.cluster_id]}/{job.slurm_id}"


def _gpu_h(measured: JobEttr, seconds: float) -> float:
    return measured.job.gpus * seconds


def _columns() -> list[tuple[str, str]]:
    return [
        ("ettr_pct", "ETTR %"),
        ("productive_gpu_h", "productive GPU-h"),
        *((f"{cause}_gpu_h", f"{LABELS[cause]} GPU-h") for cause in CAUSES),
        ("other_gpu_h", "other GPU-h"),
        ("estimates", "estimated terms"),
    ]


def ettr(query: ReportQuery) -> Report:
    now = timezone.now()
    span = query.span(now)
    measured = _restarted(span, now)
    report = Report("ettr", "ETTR and badput by cause", query)
    accounts: dict[str, Totals] = defaultdict(Totals)
    cluster = Totals()
    for item in measured:
        accounts[item.job.account].add(item)
        cluster.add(item)
    for account, gpus, jobs, wall_s in _never_restarted(span, now):
        accounts[account].add_whole(jobs, gpus * wall_s)
        cluster.add_whole(jobs, gpus * wall_s)
    by_account = Table(
        "by_account", "ETTR by account", [("account", "account"), ("jobs", "jobs"), *_columns()]
    )
    for account in sorted(accounts, key=lambda name: (-accounts[name].jobs, name)):
        by_account.rows.append(
            {"account": account, "jobs": accounts[account].jobs, **accounts[account].row()}
        )
    by_job = Table(
        "by_job",
        f"The {TOP_JOBS} jobs with the most badput",
        [("job", "job"), ("account", "account"), ("user", "user"), ("gpus", "GPUs"),
         ("restarts", "restarts"), ("wall_h", "wall-clock h"), ("source", "from"),
         *_columns()],
    )  # fmt: skip
    worst = sorted(measured, key=lambda m: -_gpu_h(m, m.wall_s - m.productive_s))[:TOP_JOBS]
    label = _job_label(span)
    for item in worst:
        job, one = item.job, Totals()
        one.add(item)
        by_job.rows.append(
            {"job": label(job), "account": job.account, "user": job.user, "gpus": job.gpus,
             "restarts": job.restart_count, "wall_h": hours(item.wall_s),
             "source": SOURCES[item.source], **one.row()}
        )  # fmt: skip
    report.tables = [by_account, by_job]
    totals = cluster.row()
    # Lost work and restore as Goodput defines them, over the interruptions in the range;
    # the tables split each job's own (from its first start to its end) by cause.
    lost = lost_work(span)
    report.summary = {
        "cluster_ettr_pct": totals["ettr_pct"],
        "jobs": cluster.jobs,
        "lost_gpu_h": lost.summary()["lost_gpu_h"],
        "restore_gpu_h": lost.summary()["restore_gpu_h"],
        "node_replacement_gpu_h": totals["node_replacement_gpu_h"],
        "queue_after_requeue_gpu_h": totals["queue_after_requeue_gpu_h"],
    }
    report.notes += [*HELP, LOST_WORK_NOTE]
    if not cluster.jobs:
        report.message = NO_DATA
    return report
