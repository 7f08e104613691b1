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
"""

from __future__ import annotations

import copy
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Prefetch
from django.utils import timezone

from clusters.remediation.models import JobEffect, Remediation, RemediationJob, StepOutcome
from jobs.models import Job, JobProgress, JobStateChange
from jobs.timeline import (
    MATCH_SLACK,
    Facts,
    _attempt_end,
    _run_that_requeued,
    restarts_in,
    run_intervals,
)

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

    job: Job
    wall_s: float
    running_s: float
    badput: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0.0))
    estimated: set[str] = field(default_factory=set)

    @property
    def productive_s(self) -> float:
        lost = sum(
            self.badput[name]
            for name in ("lost_progress", "detection", "checkpoint_grace", "restore")
        )
        return max(0.0, self.running_s - lost)

    @property
    def other_s(self) -> float:
        return max(0.0, self.wall_s - self.productive_s - sum(self.badput.values()))

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
        run = _run_that_requeued(facts.runs, change.at)
        requeued = [e.at for e in run.effects if e.effect == JobEffect.REQUEUED] if run else []
        stopped, resumed, checkpoint = _attempt_end(facts, change, requeued)
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
    """ETTR of each job (that ran), reading everything in a few queries.

    A job that never restarted lost nothing to any of the causes: its wall clock is
    its run, from Slurm's start to its end, all of it productive. Only restarted
    jobs (a few per cent of a year's) have their history read."""
    now = now or timezone.now()
    jobs = list(jobs)
    results = [
        JobEttr(
            job,
            _seconds(job.start_at, job.end_at or now),
            _seconds(job.start_at, job.end_at or now),
        )
        for job in jobs
        if not job.restart_count and job.start_at
    ]
    jobs = [job for job in jobs if job.restart_count]
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


def _runs_by_job(jobs) -> dict[int, list[Remediation]]:
    """The runs that acted on each restarted job, with their effects, steps and incident."""
    restarted = [job for job in jobs if job.restart_count]
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
