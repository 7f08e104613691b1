"""Which jobs a person may list, and the queue's filters."""

from __future__ import annotations

from django.db.models import Case, DateTimeField, F, IntegerField, Q, Value, When
from django.db.models.expressions import OrderBy
from django.http import Http404

from core.roles import Role, has_role, is_admin
from jobs.access import can_view_job, unix_user_for
from jobs.models import ACTIVE_JOB_STATES, Job, JobState


def visible_jobs(user):
    jobs = Job.objects.all()
    if is_admin(user) or has_role(user, Role.MANAGER):
        return jobs
    if has_role(user, Role.RESEARCHER):
        return jobs.filter(user=unix_user_for(user))
    return jobs.none()


def now_first(hidden: Q | None = None) -> list:
    """The order a queue opens in: what is happening now, then what has just ended.

    Running and pending jobs come first, the most recently submitted first, so a job just
    submitted is on the first page; finished ones follow, the most recently ended first.
    Slurm gives a running job an end time (its time limit), so active jobs are never
    ordered by it. Under PrivateData a hidden job's times are not the viewer's to sort
    by: those come after the others of their kind, by id.
    """
    active = Case(
        When(state__in=ACTIVE_JOB_STATES, then=Value(0)), default=Value(1),
        output_field=IntegerField(),
    )  # fmt: skip
    latest = Case(
        When(state__in=ACTIVE_JOB_STATES, then=F("submit_at")), default=F("end_at"),
        output_field=DateTimeField(),
    )  # fmt: skip
    if hidden is not None:
        latest = Case(When(hidden, then=None), default=latest, output_field=DateTimeField())
    return [
        active.asc(),
        OrderBy(latest, descending=True, nulls_last=True),
        OrderBy(F("slurm_id"), descending=True),
        OrderBy(F("pk")),
    ]


def filter_jobs(jobs, params):
    """state, partition and user filters; unknown states are ignored rather than an error."""
    state = (params.get("state") or "").upper()
    if state == "ACTIVE":
        jobs = jobs.filter(state__in=ACTIVE_JOB_STATES)
    elif state in JobState.values:
        jobs = jobs.filter(state=state)
    if params.get("partition"):
        jobs = jobs.filter(partition=params["partition"])
    if params.get("user"):
        jobs = jobs.filter(user=params["user"])
    return jobs


def job_for(user, slurm_id: int) -> Job:
    """The job with this Slurm id, or 404, also when it is not theirs to see.

    One answer for both: a 403 would tell a researcher which ids other people's
    jobs have.
    """
    job = Job.objects.filter(slurm_id=slurm_id, superseded=False).order_by("cluster_id").first()
    if job is None or not can_view_job(user, job):
        raise Http404("No such job.")
    return job
