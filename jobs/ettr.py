"""ETTR and badput by cause, per job, from the rows Medbay keeps about it.

Effective Training Time Ratio (Meta, "Revisiting Reliability in Large-Scale ML
Research Clusters", HPCA 2025): the share of a job's wall-clock time, from its
first start to its end, in which it made progress it kept. What it lost is
split by cause, after Google's ML Productivity Goodput (scheduling, runtime and
program goodput), into terms that do not overlap:

- lost progress: work since the last checkpoint, redone after the restart
  (from the later of the attempt's start and its last checkpoint to the fault,
  or to the stop when no fault is recorded);
- detection: the fault (the incident's first event) to the node's drain;
- checkpoint grace: the drain to the requeue (the job is told to save and stop);
- node replacement: the remediation's replace step, while the job waited;
- queue wait after a requeue: the rest of the time from the requeue to running again;
- restore: running again to the first progress report (reloading the checkpoint);
- other: what is left of the wall clock (stops Medbay has no record of).

productive = running time - lost progress - detection - grace - restore, and
ETTR = productive / wall clock. A job that never reported progress has no
checkpoint or first report to go by: its lost progress is counted as the whole
attempt before the stop and its restore as zero, and both are named estimates.

Jobs Medbay never saw (from before it was installed, or never synced) have only
Slurm's accounting: one record per attempt, the earlier ones ending REQUEUED. Their
attempts give the running time and the queue wait after each requeue exactly;
everything else is as for a job without progress reports: each requeued attempt is
lost progress (it holds the detection and checkpoint grace too, which no record
separates), and restore is zero, both named estimates.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Prefetch
from django.utils import timezone

from jobs.models import AccountingJob, Job, JobProgress, JobState, JobStateChange
from jobs.timeline import (
    MATCH_SLACK,
    Facts,
    attempt_end,
    restarts_in,
    run_intervals,
    run_that_requeued,
)
from remediation.models import JobEffect, Remediation, RemediationJob, StepOutcome

CAUSES = (
    "lost_progress",
    "detection",
    "checkpoint_grace",
    "node_replacement",
    "queue_after_requeue",
    "restore",
)


@dataclass
class JobEttr:
    """One job's wall clock split into productive time and badput by cause (seconds)."""

    job: Job  # for a job known only from Slurm's accounting, an unsaved Job built from it
    wall_s: float
    running_s: float
    badput: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0.0))
    estimated: set[str] = field(default_factory=set)
    source: str = "medbay"  # or "accounting"

    @property
    def productive_s(self) -> float:
        lost = sum(
            self.badput[name]
            for name in ("lost_progress", "detection", "checkpoint_grace", "restore")
        )
        return max(0.0, self.running_s - lost)

    @property
    def ettr(self) -> float | None:
        return self.productive_s / self.wall_s if self.wall_s > 0 else None


def _seconds(start: datetime | None, end: datetime | None) -> float:
    if start is None or end is None:
        return 0.0
    return max(0.0, (end - start).total_seconds())


def _clamp(moment: datetime, low: datetime, high: datetime) -> datetime:
    return max(low, min(moment, high))


def _step(run: Remediation, name: str):
    done = [s for s in run.steps.all() if s.name == name and s.outcome == StepOutcome.SUCCEEDED]
    return done[-1] if done else None


def job_ettr(facts: Facts, now: datetime) -> JobEttr | None:
    """ETTR of one job from its facts (state history, runs, progress); None if it never ran."""
    job, intervals = facts.job, facts.intervals
    if not intervals:
        return None
    first, end = intervals[0][0], job.end_at or intervals[-1][1] or now
    result = JobEttr(job, _seconds(first, end), sum(_seconds(a, b) for a, b in intervals))
    reports = bool(facts.progress)
    for change in restarts_in(facts.changes):
        run = run_that_requeued(facts.runs, change.at)
        requeued = [e.at for e in run.effects if e.effect == JobEffect.REQUEUED] if run else []
        stopped, resumed, checkpoint = attempt_end(facts, change, requeued)
        began = max((a for a, _ in intervals if a <= stopped), default=first)
        cut = stopped
        if run is not None:
            cut = _fault_time(run, began, stopped, result)
            drain = _step(run, "drain")
            drained = _clamp(drain.finished_at or drain.started_at, cut, stopped) if drain else cut
            result.badput["detection"] += _seconds(cut, drained)
            result.badput["checkpoint_grace"] += _seconds(drained, stopped)
        if reports:
            saved = checkpoint.reported_at if checkpoint else began
            result.badput["lost_progress"] += _seconds(max(began, saved), cut)
        else:
            result.badput["lost_progress"] += _seconds(began, cut)
            result.estimated.add("lost_progress")
        if resumed is not None:
            _waiting(result, run, stopped, resumed.at)
            _restore(result, facts, resumed.at, end)
    return result


def _fault_time(run: Remediation, began: datetime, stopped: datetime, result: JobEttr):
    """The fault: the incident's first event, else the run's creation (an estimate)."""
    if run.incident is not None:
        return _clamp(run.incident.opened_at, began, stopped)
    result.estimated.add("detection")
    return _clamp(run.created_at, began, stopped)


def _waiting(result: JobEttr, run, stopped: datetime, resumed: datetime) -> None:
    replaced = 0.0
    step = _step(run, "replace") if run is not None else None
    if step is not None and step.finished_at:
        replaced = _seconds(max(step.started_at, stopped), min(step.finished_at, resumed))
    result.badput["node_replacement"] += replaced
    result.badput["queue_after_requeue"] += max(0.0, _seconds(stopped, resumed) - replaced)


def _restore(result: JobEttr, facts: Facts, resumed: datetime, end) -> None:
    later = [p.reported_at for p in facts.progress if p.reported_at >= resumed]
    stop_after = min((b for a, b in facts.intervals if a >= resumed), default=end)
    if later:
        result.badput["restore"] += _seconds(resumed, min(later[0], stop_after))
    else:
        # Nothing reported after it ran again: how long reloading took is unknown.
        result.estimated.add("restore")


def ettr_for_jobs(jobs, *, now: datetime | None = None) -> list[JobEttr]:
    """ETTR of each restarted job among JOBS (that ran), reading everything in a few
    queries. A job that never restarted lost nothing to any of the causes: it is left
    out, and the report sums such jobs in the database (a year holds a million)."""
    now = now or timezone.now()
    jobs = [job for job in jobs if job.restart_count]
    results = []
    pks = [job.pk for job in jobs]
    changes, progress = defaultdict(list), defaultdict(list)
    for change in JobStateChange.objects.filter(job_id__in=pks).order_by("job_id", "at", "id"):
        changes[change.job_id].append(change)
    for report in JobProgress.objects.filter(job_id__in=pks).order_by("reported_at", "id"):
        progress[report.job_id].append(report)
    runs = _runs_by_job(jobs)
    for job in jobs:
        history = changes[job.pk]
        facts = Facts(
            job,
            history,
            run_intervals(job, history, now),
            runs.get(job.pk, []),
            [],
            progress[job.pk],
        )
        measured = job_ettr(facts, now)
        if measured is not None:
            results.append(measured)
    return results


def _runs_by_job(restarted) -> dict[int, list[Remediation]]:
    """The runs that acted on each of the RESTARTED jobs, with their effects, steps and
    incident."""
    if not restarted:
        return {}
    ids = {job.slurm_id for job in restarted}
    effects = RemediationJob.objects.filter(slurm_job_id__in=ids).order_by("at", "id")
    runs = (
        Remediation.objects.filter(job_effects__slurm_job_id__in=ids)
        .distinct()
        .select_related("incident", "node")
        .prefetch_related("steps", Prefetch("job_effects", queryset=effects, to_attr="all_effects"))
        .order_by("created_at", "id")
    )
    by_id: dict[int, list[Job]] = defaultdict(list)
    for job in restarted:
        by_id[job.slurm_id].append(job)
    by_job: dict[int, list[Remediation]] = defaultdict(list)
    for run in runs:
        for slurm_id in {effect.slurm_job_id for effect in run.all_effects}:
            for job in by_id.get(slurm_id, ()):
                # Slurm reuses ids: what a run did to an earlier job with this id is not this one's.
                mine = [
                    e
                    for e in run.all_effects
                    if e.slurm_job_id == slurm_id
                    and (job.submit_at is None or e.at >= job.submit_at - MATCH_SLACK)
                ]
                if mine and run.node.cluster_id == job.cluster_id:
                    # A copy per job: one run may have requeued several jobs.
                    own = copy.copy(run)
                    own.effects = mine
                    by_job[job.pk].append(own)
    return by_job


def accounting_ettr(attempts: list[AccountingJob]) -> JobEttr | None:
    """ETTR of one job known only from Slurm's accounting: ATTEMPTS in submit order, each
    but the last ending REQUEUED. None if the job never ran."""
    ran = [attempt for attempt in attempts if attempt.start_at is not None]
    if not ran:
        return None
    last = attempts[-1]
    job = Job(
        cluster_id=last.cluster_id,
        slurm_id=last.slurm_id,
        name=last.name,
        user=last.user,
        account=last.account,
        partition=last.partition,
        gpus=max(attempt.gpus for attempt in attempts),
        state=last.state,
        restart_count=len(attempts) - 1,
        submit_at=attempts[0].submit_at,
        start_at=ran[-1].start_at,
        end_at=last.end_at,
    )
    result = JobEttr(
        job,
        _seconds(ran[0].start_at, last.end_at),
        sum(_seconds(attempt.start_at, attempt.end_at) for attempt in ran),
        source="accounting",
    )
    for requeued, after in zip(attempts, attempts[1:], strict=False):
        result.badput["lost_progress"] += _seconds(requeued.start_at, requeued.end_at)
        result.badput["queue_after_requeue"] += _seconds(requeued.end_at, after.start_at)
    if len(attempts) > 1:
        result.estimated |= {"lost_progress", "restore"}
    return result


def restarted_accounting_jobs(
    start: datetime, end: datetime, *, cluster_id: int | None = None
) -> list[JobEttr]:
    """ETTR of each requeued job Medbay has only accounting records of, that ended in
    [START, END) (in the cluster CLUSTER_ID, or any): its final attempt and the REQUEUED
    attempts just before it, in two queries. Jobs that never restarted are summed by the
    report in SQL instead."""
    records = AccountingJob.objects.all()
    if cluster_id is not None:
        records = records.filter(cluster_id=cluster_id)
    finals = list(
        records.filter(job__isnull=True, restarts__gt=0, end_at__gte=start, end_at__lt=end)
        .exclude(state=JobState.REQUEUED)
        .order_by("cluster_id", "slurm_id", "submit_at")
    )
    if not finals:
        return []
    earlier: dict[tuple[int, int], list[AccountingJob]] = defaultdict(list)
    requeued = records.filter(
        state=JobState.REQUEUED,
        slurm_id__in={final.slurm_id for final in finals},
        submit_at__lt=max(final.submit_at for final in finals),
    ).order_by("submit_at", "id")
    for attempt in requeued:
        earlier[(attempt.cluster_id, attempt.slurm_id)].append(attempt)
    results = []
    for final in finals:
        before = [
            attempt
            for attempt in earlier[(final.cluster_id, final.slurm_id)]
            if attempt.submit_at < final.submit_at
        ]
        # The unbroken run of requeues just before it: a reused id's older job is not this one.
        attempts = [*before[max(0, len(before) - final.restarts) :], final]
        measured = accounting_ettr(attempts)
        if measured is not None:
            results.append(measured)
    return results
