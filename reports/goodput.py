"""Goodput: how much of the GPU time jobs held turned into progress that was kept.

productive = allocated - lost work - restore, where
- allocated is GPUs x the job's RUNNING intervals in the range;
- lost work, at each interruption (a RUNNING job requeued, failed, preempted...),
  is GPUs x the time since the later of the interval's start and the job's last
  reported checkpoint;
- restore is GPUs x the time from a restarted job's start until its
  first progress report (reloading the checkpoint, warming up).
Both need the job's progress reports (`jobs.JobProgress`); for jobs that never
reported they are unknown and counted as zero, and the report says how many
interruptions that affects.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db.models import (
    Case,
    F,
    IntegerField,
    OuterRef,
    Q,
    Subquery,
    Sum,
    Value,
    When,
    Window,
)
from django.db.models.functions import Coalesce, Greatest, Lag, Lead, Least

from jobs.models import (
    ACTIVE_JOB_STATES,
    INTERRUPTED_STATES,
    INTERRUPTION,
    Job,
    JobProgress,
    JobState,
    JobStateChange,
)
from reports.base import NO_DATA, Report, Table, hours, percent, sql_list
from reports.intervals import (
    Epoch,
    Span,
    job_run_intervals,
    job_span_intervals,
    report_settings,
    summed,
)
from reports.params import ReportQuery
from reports.rollups import job_sources

TOP_JOBS = 50
# How far a job's state changes may lie outside its start and its last update: the
# sync stamps changes with the portal's clock, Slurm its start time with slurmctld's.
CLOCK_SLACK = timedelta(minutes=1)


def _keys(fields: list[str], prefix: str) -> dict:
    return {
        f"g{index}": F(prefix + field)
        if field in ("id", "slurm_id")
        else Coalesce(F(prefix + field), Value(""))
        for index, field in enumerate(fields)
    }


def allocated(span: Span, fields: list[str], *, job_ids=None) -> dict[tuple, float]:
    """Allocated GPU-seconds per combination of `fields` values.

    By account and user, whole days come from the daily rollups; by job (`id`, or for
    `job_ids`, the jobs' pks) every row is read, as the rollups do not keep jobs apart.
    """
    totals: dict[tuple, float] = {}
    names = [f"g{index}" for index in range(len(fields))]
    if job_ids is None and set(fields) <= {"account", "user", "partition"}:
        sources = job_sources(span)
    else:
        sources = [(job_run_intervals(span), "job__"), (job_span_intervals(span), "")]
    for rows, prefix in sources:
        if job_ids is not None:
            rows = rows.filter(**{f"{prefix}id__in": job_ids})
        for row in summed(
            rows.annotate(**_keys(fields, prefix)),
            [*names, "w", "s_off", "e_off", "run_state"],
            names,
            {"gpu_s": "SUM(w * (e_off - s_off))"},
            where="run_state = 'RUNNING' AND e_off > s_off",
        ):
            key = tuple(row[name] for name in names)
            totals[key] = totals.get(key, 0.0) + (row["gpu_s"] or 0.0)
    return totals


def interrupted_jobs(span: Span) -> list[int]:
    """Ids of the jobs that can have lost work or restore in the span: those with a
    change into an interruption or a restart (read from a partial index). Nearly every
    job runs once and completes; the windows over job history then read only these.

    A list, not a subquery: PostgreSQL cannot tell how few rows the index holds and
    would join every job's history to it.
    """
    rows = span.of_cluster(JobStateChange.objects, "job__cluster")
    rows = rows.filter(INTERRUPTION, at__lt=span.data_end)
    return sorted(set(rows.values_list("job_id", flat=True)))


def top_jobs(span: Span, limit: int, interrupted: list[int]) -> dict[int, float]:
    """The `limit` jobs (their pks: a Slurm id may name a job in each cluster) that held
    the most GPU-seconds in the span, exactly, with their GPU-seconds, without replaying
    every job's history.

    Jobs that were `interrupted` or restarted are measured from their history. The
    others ran once: a finished one between its start and its last change (the sync
    stamps each change and the job's `updated_at` together), an active one from its
    start on. GPUs times that stretch inside the span bounds what each held; they are
    measured in order of that bound until the next bound cannot beat the `limit`-th
    figure, which the first page of bounds nearly always settles.
    """
    jobs = span.of_cluster(Job.objects, "cluster")
    measured = allocated(span, ["id"], job_ids=interrupted) if interrupted else {}
    held = {key[0]: value for key, value in measured.items()}
    data_end = Value(span.data_end)
    lower = Greatest(Coalesce(F("start_at") - CLOCK_SLACK, Value(span.start)), Value(span.start))
    finished = Greatest("end_at", "updated_at") + CLOCK_SLACK
    last = Case(When(Q(state__in=ACTIVE_JOB_STATES) | Q(end_at__isnull=True), then=data_end))
    upper = Least(Coalesce(last, finished), data_end)
    bound = Sum(F("gpus") * Greatest(Epoch(upper) - Epoch(lower), Value(0.0)))
    bounds = (
        jobs.filter(
            Q(end_at__isnull=True) | Q(end_at__gt=span.start) | Q(state__in=ACTIVE_JOB_STATES)
        )
        .filter(Q(start_at__isnull=True) | Q(start_at__lt=span.data_end))
        .exclude(pk__in=interrupted)
        .values("pk")
        .annotate(bound=bound)
        .filter(bound__gt=0)
        .order_by("-bound", "pk")
        .values_list("pk", "bound")
    )
    offset, size = 0, 8 * limit
    while True:
        with report_settings():  # the grouping by job spills to disk at the default work_mem
            page = list(bounds[offset : offset + size])
        if page:
            measured = allocated(span, ["id"], job_ids=[pk for pk, _ in page])
            held.update((key[0], value) for key, value in measured.items())
        best = sorted(held.values(), reverse=True)
        if len(page) < size or (len(best) >= limit and page[-1][1] <= best[limit - 1]):
            break
        offset, size = offset + size, size * 4
    ranked = sorted((key for key in held if held[key] > 0), key=lambda key: (-held[key], key))
    return {key: held[key] for key in ranked[:limit]}


def _stops(span: Span):
    """State changes annotated with what lost work and restore need (windows + subqueries)."""
    rows = span.of_cluster(JobStateChange.objects, "job__cluster")
    rows = rows.filter(at__lt=span.data_end).filter(
        Q(job__end_at__isnull=True) | Q(job__end_at__gt=span.start)
    )
    order = [F("at"), F("id")]
    by_job = [F("job_id")]
    at_off = span.offset(F("at"))
    previous_at = Window(Lag("at"), partition_by=by_job, order_by=order)
    next_at = Window(Lead("at"), partition_by=by_job, order_by=order)
    checkpoint = JobProgress.objects.filter(
        job=OuterRef("job_id"), checkpoint_saved=True, reported_at__lte=OuterRef("at")
    ).order_by("-reported_at")
    first_report = JobProgress.objects.filter(
        job=OuterRef("job_id"), reported_at__gte=OuterRef("at")
    ).order_by("reported_at")
    # Not correlated, so PostgreSQL hashes it once instead of probing per row.
    reports = Q(job_id__in=JobProgress.objects.values("job_id"))
    rows = rows.annotate(
        w=F("job__gpus"),
        run_state=F("to_state"),
        prev_state=Window(Lag("to_state"), partition_by=by_job, order_by=order),
        at_off=at_off,
        reported=Case(When(reports, then=Value(1)), default=Value(0), output_field=IntegerField()),
        # Correlated subqueries only for the few rows that need them: stops and
        # restarts of jobs that report progress at all.
        checkpoint_at=Case(
            When(
                reports,
                to_state__in=INTERRUPTED_STATES,
                then=Subquery(checkpoint.values("reported_at")[:1]),
            )
        ),
        resumed_at=Case(
            When(
                reports,
                to_state=JobState.RUNNING,
                restart_count__gt=0,
                then=Subquery(first_report.values("reported_at")[:1]),
            )
        ),
    )
    since = Coalesce(F("checkpoint_at"), previous_at)
    return rows.annotate(
        lost_s=at_off - Greatest(span.offset(previous_at), span.offset(since), Value(0.0)),
        restore_s=Case(
            When(
                resumed_at__isnull=False,
                then=Least(
                    span.offset(F("resumed_at")),
                    span.offset(Coalesce(next_at, Value(span.data_end))),
                    Value(span.data_seconds),
                )
                - Greatest(at_off, Value(0.0)),
            )
        ),
    )


def losses(
    span: Span, fields: list[str], interrupted: list[int], *, job_ids=None
) -> dict[tuple, dict]:
    """Per combination of `fields`: lost and restore GPU-seconds, interruptions of unknown
    loss, from the histories of the `interrupted` jobs (see interrupted_jobs)."""
    if not interrupted:
        return {}
    names = [f"g{index}" for index in range(len(fields))]
    rows = _stops(span).filter(job_id__in=interrupted)
    rows = rows.annotate(**_keys(fields, "job__"))
    if job_ids is not None:
        rows = rows.filter(job_id__in=job_ids)
    in_range = f"at_off >= 0 AND at_off < {span.data_seconds!r}"
    stop = f"prev_state = 'RUNNING' AND run_state IN {sql_list(INTERRUPTED_STATES)} AND {in_range}"
    result = summed(
        rows,
        [*names, "w", "run_state", "prev_state", "at_off", "reported", "lost_s", "restore_s"],
        names,
        {
            "lost": f"SUM(CASE WHEN {stop} AND reported = 1 THEN w * lost_s ELSE 0 END)",
            "unknown": f"SUM(CASE WHEN {stop} AND reported = 0 THEN 1 ELSE 0 END)",
            "restore": "SUM(CASE WHEN restore_s > 0 THEN w * restore_s ELSE 0 END)",
        },
        where=f"({stop}) OR restore_s > 0",
    )
    return {tuple(row[name] for name in names): row for row in result}


@dataclass(frozen=True)
class LostWork:
    """GPU-seconds lost to the interruptions in a span, and spent restoring after them:
    the one definition the Goodput and ETTR tabs both show."""

    lost_s: float
    restore_s: float
    unknown: int  # interruptions of jobs that never reported progress

    @classmethod
    def of(cls, rows: dict[tuple, dict]) -> LostWork:
        """Totals of what `losses` returned, however it was grouped."""
        values = rows.values()
        return cls(
            sum(row.get("lost") or 0.0 for row in values),
            sum(row.get("restore") or 0.0 for row in values),
            int(sum(row.get("unknown") or 0 for row in values)),
        )

    def summary(self) -> dict:
        return {
            "lost_gpu_h": hours(self.lost_s),
            "restore_gpu_h": hours(self.restore_s),
            "unknown_interruptions": self.unknown,
        }


def lost_work(span: Span) -> LostWork:
    """Lost work and restore over the span, for the whole cluster."""
    return LostWork.of(losses(span, ["account"], interrupted_jobs(span)))


def _fold(values: dict[tuple, float | dict], index: int) -> dict:
    """Sum (account, user) keyed figures down to one of the two."""
    folded: dict = {}
    for key, value in values.items():
        if isinstance(value, dict):
            entry = folded.setdefault(key[index], {"lost": 0.0, "restore": 0.0, "unknown": 0})
            for name in entry:
                entry[name] += value.get(name) or 0
        else:
            folded[key[index]] = folded.get(key[index], 0.0) + value
    return folded


def goodput_table(group: str, heading: str, held: dict, lost: dict) -> Table:
    table = Table(
        f"by_{group}",
        heading,
        [(group, group), ("allocated_gpu_h", "allocated GPU-h"), ("lost_gpu_h", "lost work GPU-h"),
         ("restore_gpu_h", "restore GPU-h"), ("productive_gpu_h", "productive GPU-h"),
         ("goodput_pct", "goodput %"), ("unknown_interruptions", "interruptions, loss unknown")],
    )  # fmt: skip
    for name in sorted(held, key=lambda key: (-held[key], str(key))):
        loss = lost.get(name, {})
        waste = (loss.get("lost") or 0.0) + (loss.get("restore") or 0.0)
        kept = max(0.0, held[name] - waste)
        table.rows.append(
            {
                group: name,
                "allocated_gpu_h": hours(held[name]),
                "lost_gpu_h": hours(loss.get("lost")),
                "restore_gpu_h": hours(loss.get("restore")),
                "productive_gpu_h": hours(kept),
                "goodput_pct": percent(kept, held[name]),
                "unknown_interruptions": int(loss.get("unknown") or 0),
            }
        )
    return table


def job_labels(span: Span, pks: list[int]) -> dict[int, int | str]:
    """Job pk -> its Slurm id as the table names it; "cluster/id" where the span combines
    clusters, as each cluster numbers its own jobs."""
    rows = Job.objects.filter(pk__in=pks).values_list("pk", "slurm_id", "cluster__name")
    return {pk: f"{cluster}/{slurm_id}" if span.qualified else slurm_id
            for pk, slurm_id, cluster in rows}  # fmt: skip


def _tables(span: Span) -> tuple[dict[str, Table], float, LostWork]:
    """The tables by account, user and top job; allocated GPU-seconds and lost work."""
    # Accounts and users come from one pass grouped by both; jobs from a top-N pass.
    # Only the interrupted jobs' histories are replayed, for what they lost.
    interrupted = interrupted_jobs(span)
    held = allocated(span, ["account", "user"])
    lost = losses(span, ["account", "user"], interrupted)
    tables = {
        group: goodput_table(group, f"Goodput by {group}", _fold(held, i), _fold(lost, i))
        for i, group in enumerate(("account", "user"))
    }
    top = top_jobs(span, TOP_JOBS, interrupted)
    jobs_lost = losses(span, ["id"], interrupted, job_ids=list(top))
    label = job_labels(span, list(top))
    tables["job"] = goodput_table(
        "job",
        f"Top {TOP_JOBS} jobs by allocated GPU-hours",
        {label[pk]: value for pk, value in top.items()},
        {label[key[0]]: value for key, value in jobs_lost.items()},
    )
    return tables, sum(held.values()), LostWork.of(lost)


def goodput(query: ReportQuery) -> Report:
    span = query.span()
    report = Report("goodput", "Goodput", query)
    # The grouping asked for comes first, so it is what the CSV export gives by default.
    order = ("user", "account", "job") if query.group == "user" else ("account", "user", "job")
    tables, held, lost = _tables(span)
    report.tables = [tables[group] for group in order]
    kept = max(0.0, held - lost.lost_s - lost.restore_s)
    report.summary = {
        "allocated_gpu_h": hours(held),
        **lost.summary(),
        "productive_gpu_h": hours(kept),
        "goodput_pct": percent(kept, held),
    }
    if report.summary["unknown_interruptions"]:
        report.notes.append(
            "Some interrupted jobs never reported progress; their lost work is unknown "
            "and not subtracted."
        )
    if not held:
        report.message = NO_DATA
    return report
