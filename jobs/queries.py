"""Which jobs a person may list, and the queue's filters."""

from __future__ import annotations

from django.db.models import Case, DateTimeField, F, IntegerField, Q, Value, When
from django.db.models.expressions import OrderBy
from django.http import Http404
from django.urls import reverse

from clusters.addresses import SeveralClusters
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
    """cluster, state, partition and user filters; unknown states are ignored rather than
    an error (an unknown cluster is the caller's to refuse: "all" means every one)."""
    cluster = params.get("cluster") or "all"
    if cluster != "all":
        jobs = jobs.filter(cluster__name=cluster)
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


def job_for(user, slurm_id: int, *, cluster_id: int | None = None) -> Job:
    """The job with this Slurm id (on cluster CLUSTER_ID, else on the first cluster that
    has it), or 404, also when it is not theirs to see.

    One answer for both: a 403 would tell a researcher which ids other people's
    jobs have.
    """
    jobs = Job.objects.filter(slurm_id=slurm_id, superseded=False).select_related("cluster")
    if cluster_id is not None:
        jobs = jobs.filter(cluster_id=cluster_id)
    job = jobs.order_by("cluster_id").first()
    if job is None or not can_view_job(user, job):
        raise Http404("No such job.")
    return job


def jobs_with_id(user, slurm_id: int) -> list[Job]:
    """The jobs with this Slurm id that this person may see, one per cluster at most."""
    jobs = Job.objects.filter(slurm_id=slurm_id, superseded=False).select_related("cluster")
    return [job for job in jobs.order_by("cluster__name") if can_view_job(user, job)]


def job_url(job, page: str = "") -> str:
    """The job's page (or one of its sub-pages, PAGE) at its cluster address."""
    return reverse("cluster-job", args=[job.cluster.name, job.slurm_id]) + page


def job_at(user, slurm_id: int, cluster: str = "") -> Job:
    """The job at `/jobs/<cluster>/<id>/`; by id alone (an address made before jobs had
    clusters) the one job with that id this person may see, SeveralClusters where more
    clusters have one, 404 where none."""
    if cluster:
        jobs = Job.objects.filter(slurm_id=slurm_id, superseded=False, cluster__name=cluster)
        job = jobs.select_related("cluster").first()
        if job is None or not can_view_job(user, job):
            raise Http404("No such job.")
        return job
    found = jobs_with_id(user, slurm_id)
    if not found:
        raise Http404("No such job.")
    if len(found) > 1:
        choices = [(job.cluster.name, job_url(job)) for job in found]
        old = reverse("job-detail", args=[slurm_id])
        raise SeveralClusters(f"Job {slurm_id}", old, choices)
    return found[0]
