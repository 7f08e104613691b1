"""The steps a remediation plan is made of, one small function each.

A step is `(run, ctx) -> StepResult`. It may be run again after a crash at any
point (the engine records its intent, calls the step outside any transaction,
then records the result), so every step first looks at the cluster as it is and
does nothing when its work is already done.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.utils.dateparse import parse_datetime

from clusters.backends.base import ClusterBackend, FleetProvider, JobInfo, NodeInfo, nodes_named
from remediation.models import Remediation, RemediationJob, StepOutcome

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepResult:
    """What one attempt of a step came to; `retry_after` only for WAITING."""

    outcome: StepOutcome
    message: str = ""
    retry_after: timedelta = timedelta(0)


def succeeded(message: str = "") -> StepResult:
    return StepResult(StepOutcome.SUCCEEDED, message)


def skipped(message: str) -> StepResult:
    return StepResult(StepOutcome.SKIPPED, message)


def waiting(message: str, seconds: float) -> StepResult:
    return StepResult(StepOutcome.WAITING, message, timedelta(seconds=max(seconds, 0)))


def failed(message: str) -> StepResult:
    return StepResult(StepOutcome.FAILED, message)


def needs_attention(message: str) -> StepResult:
    """Stop and ask a human; the run keeps its place and an admin may retry it."""
    return StepResult(StepOutcome.NEEDS_ATTENTION, message)


Validator = Callable[[ClusterBackend, str], tuple[bool, str]]


@dataclass
class StepContext:
    """What a step may use: the cluster, the fleet, the run's saved context, the clock."""

    backend: ClusterBackend
    fleet: FleetProvider
    validator: Validator
    now: datetime
    context: dict
    attempt: int = 1
    save: Callable[[dict], None] = lambda context: None
    after_commit: list[Callable[[], None]] = field(default_factory=list)

    def remember(self, **values) -> None:
        """Store values in the run's context now, before acting on the cluster."""
        self.context.update(values)
        self.save(self.context)

    def node(self, name: str) -> NodeInfo | None:
        return next(iter(nodes_named(self.backend, [name])), None)

    def jobs(self) -> dict[int, JobInfo]:
        return {job.job_id: job for job in self.backend.jobs()}

    def running_jobs_on(self, node: str) -> list[JobInfo]:
        return [
            job
            for job in self.backend.jobs()
            if job.state in ("RUNNING", "SUSPENDED", "CONFIGURING") and node in job.nodes
        ]

    def since(self, key: str) -> timedelta | None:
        """Time since the ISO timestamp stored under `key`, or None if none is."""
        stamp = parse_datetime(self.context.get(key) or "")
        return self.now - stamp if stamp else None

    def seconds_since(self, stamp: str) -> float:
        moment = parse_datetime(stamp or "")
        return (self.now - moment).total_seconds() if moment else 0.0

    def record_jobs(self, run: Remediation, effect: str, held: dict[int, list[str]]) -> None:
        """Write that the run did EFFECT to the jobs in HELD (id -> their nodes), once each.

        Written as the step acts, not after: a restart explanation must name the
        run even when the worker dies before it records the step's result.
        """
        if run.pk is None or not held:
            return
        RemediationJob.objects.bulk_create(
            [
                RemediationJob(
                    remediation=run,
                    slurm_job_id=int(job_id),
                    effect=effect,
                    nodes=list(node_names),
                    at=self.now,
                )
                for job_id, node_names in held.items()
            ],
            ignore_conflicts=True,
        )

    def notify_owners(self, run: Remediation, job_ids, what: str) -> None:
        """Tell the jobs' owners what happened, once the step's result is committed."""
        ids = sorted({int(job_id) for job_id in job_ids})
        if ids:
            self.after_commit.append(lambda: _notify(run, ids, what))


def _notify(run: Remediation, job_ids: list[int], what: str) -> None:
    from jobs.models import Job

    try:
        # Imported late: notifications belong to the jobs app and are optional here.
        from jobs.notifications import notify_remediation_effect
    except ImportError:
        logger.info("jobs.notifications unavailable; owners of %s not told", job_ids)
        return
    cluster_id = run.node.cluster_id
    for job in Job.objects.filter(cluster_id=cluster_id, slurm_id__in=job_ids, superseded=False):
        try:
            notify_remediation_effect(job, what=what, remediation=run)
        except Exception:  # a mail outage must never stall a remediation
            logger.warning("Notifying the owner of job %s failed", job.slurm_id, exc_info=True)


@dataclass(frozen=True)
class Step:
    """A registered step: its function, what a dry run says, whether it only polls."""

    name: str
    run: Callable[[Remediation, StepContext], StepResult]
    describe: str
    polls: bool = False


STEPS: dict[str, Step] = {}


def step(name: str, describe: str, *, polls: bool = False):
    """Register a step. `polls` steps only look, so no intent row is written per poll."""

    def register(function):
        STEPS[name] = Step(name=name, run=function, describe=describe, polls=polls)
        return function

    return register


def get_step(name: str) -> Step:
    """A registered step; the step modules register theirs when the engine imports them."""
    return STEPS[name]


def on_commit_all(callbacks: list[Callable[[], None]]) -> None:
    for callback in callbacks:
        transaction.on_commit(callback)
