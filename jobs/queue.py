"""The queue page: the whole cluster's jobs as `squeue` shows them to this person.

Everyone with a role sees every job. When a cluster's PrivateData includes
`jobs`, a researcher sees other users' jobs there only as id, partition and
state: the rest is never read into the page, cannot be sorted on (that would
order the hidden rows by their secret values) and cannot be filtered on (a
name search would say which hidden jobs match).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from django.core.paginator import Page, Paginator
from django.db.models import BooleanField, Case, DateTimeField, F, FloatField, Func, Q, Value, When
from django.db.models.expressions import OrderBy
from django.http import QueryDict
from django.utils import timezone

from clusters.models import Cluster
from clusters.privacy import private_data_for
from core.roles import Role, has_role, is_admin
from jobs.access import job_viewer, unix_user_for
from jobs.models import Job
from jobs.queries import filter_jobs, now_first
from jobs.timeline import lost_gpu_hours_by_job

PAGE_SIZE = 50
MAX_PARAM_LENGTH = 100
QUEUE_PARAMS = ("cluster", "state", "partition", "user", "q", "sort", "order", "page")
SORT_FIELDS = {
    "id": "slurm_id",
    "name": "name",
    "user": "user",
    "state": "state",
    "partition": "partition",
    "gpus": "gpus",
    "restarts": "restart_count",
    "gpu_hours": "gpu_hours",
    "submitted": "submit_at",
}
# What PrivateData=jobs still shows of another user's job; any other sort key is
# masked to NULL on hidden rows.
PUBLIC_FIELDS = frozenset({"id", "state", "partition"})
# A first click on a column sorts biggest, newest or most first for these.
DESCENDING_FIRST = frozenset({"id", "gpus", "restarts", "gpu_hours", "submitted"})
ROW_FIELDS = (
    "cluster_id", "slurm_id", "name", "user", "partition", "state", "reason", "node_count",
    "gpus", "restart_count", "submit_at", "start_at", "end_at", "eligible_at",
)  # fmt: skip
# PostgreSQL refuses NUL in a string parameter (a 500, not a miss).
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class HiddenJob:
    """All that PrivateData=jobs lets a researcher see of someone else's job."""

    slurm_id: int
    partition: str
    state: str
    hidden: bool = True


class GpuHours(Func):
    """gpus × hours from start to end (or `now` while running); NULL until it starts.

    Never below zero: Slurm's StartTime comes from another host's clock, and a job
    read a moment after it started can carry a start a little after our `now`."""

    output_field = FloatField()

    def __init__(self, now: datetime) -> None:
        now_value = Value(now, output_field=DateTimeField())
        super().__init__(F("gpus"), F("end_at"), now_value, F("start_at"))

    def as_sql(self, compiler, connection, **extra):
        # GREATEST skips NULLs, so it goes round the end, not the product: a job not
        # yet started stays NULL. start_at is a column, with no parameter to repeat.
        hours = "EXTRACT(EPOCH FROM (GREATEST(COALESCE({1}, {2}), {3}) - {3})) / 3600.0"
        return self._render(compiler, f"CAST({{0}} * {hours} AS double precision)")

    def as_sqlite(self, compiler, connection, **extra):
        hours = "(julianday(COALESCE({1}, {2})) - julianday({3})) * 24.0"
        # SQLite's MAX() of several values is NULL if any is: not started stays NULL.
        return self._render(compiler, f"MAX({{0}} * {hours}, 0.0)")

    def _render(self, compiler, template: str):
        # Only `now` carries a parameter and it appears once, so the parameters line up.
        compiled = [compiler.compile(arg) for arg in self.get_source_expressions()]
        sql = template.format(*(part for part, _ in compiled))
        return sql, [param for _, params in compiled for param in params]


def gpu_hours_of(job, now: datetime | None = None) -> float | None:
    """GpuHours in Python, for a row rendered outside the queue (live updates, job page)."""
    if job.start_at is None:
        return None
    end = job.end_at or now or timezone.now()
    return max(0.0, job.gpus * (end - job.start_at).total_seconds() / 3600)


def clean_params(query: QueryDict) -> QueryDict:
    """The queue's own parameters, without control characters, unknown sorts or orders."""
    cleaned = QueryDict(mutable=True)
    for key in QUEUE_PARAMS:
        value = CONTROL_CHARACTERS.sub("", query.get(key, "")).strip()[:MAX_PARAM_LENGTH]
        if value:
            cleaned[key] = value
    if cleaned.get("sort") not in SORT_FIELDS:
        cleaned.pop("sort", None)
    if cleaned.get("order") not in ("asc", "desc"):
        cleaned.pop("order", None)
    return cleaned


# With no column asked for, the queue opens on what is happening now (queries.now_first).
NOW = "now"


def sort_of(params: QueryDict) -> tuple[str, str]:
    sort = params.get("sort", NOW)
    default = "desc" if sort in DESCENDING_FIRST else "asc"
    return sort, params.get("order", default)


def hidden_condition(user) -> Q | None:
    """The jobs this person sees only as id, partition and state; None when none are."""
    if is_admin(user) or has_role(user, Role.MANAGER):
        return None
    cluster_ids = list(Cluster.objects.order_by("pk").values_list("pk", flat=True))
    private = [pk for pk, kinds in private_data_for(cluster_ids).items() if "jobs" in kinds]
    if not private:
        return None
    return Q(cluster_id__in=private) & ~Q(user=unix_user_for(user))


def queue_jobs(user, params: QueryDict, *, now: datetime | None = None):
    """Every job this person may list, annotated, filtered and sorted as `params` say."""
    if not has_role(user, Role.RESEARCHER, Role.ADMIN, Role.MANAGER):
        return Job.objects.none()
    hidden = hidden_condition(user)
    jobs = Job.objects.only(*ROW_FIELDS).annotate(
        gpu_hours=GpuHours(now or timezone.now()),
        hidden=Value(False) if hidden is None else Case(
            When(hidden, then=Value(True)), default=Value(False), output_field=BooleanField()
        ),
    )  # fmt: skip
    filtered = filter_jobs(jobs, params)
    if hidden is not None and (params.get("user") or params.get("q")):
        filtered = filtered.exclude(hidden)
    if params.get("q"):
        filtered = filtered.filter(name__icontains=params["q"])
    return filtered.order_by(*_ordering(params, hidden))


def _ordering(params: QueryDict, hidden: Q | None) -> list:
    sort, order = sort_of(params)
    if sort == NOW:
        return now_first(hidden)
    descending = order == "desc"
    tie_break = [OrderBy(F("slurm_id"), descending=descending), OrderBy(F("pk"))]
    if sort == "id":
        return tie_break
    key = F(SORT_FIELDS[sort])
    if hidden is not None and sort not in PUBLIC_FIELDS:
        key = Case(When(hidden, then=None), default=key)
    return [OrderBy(key, descending=descending, nulls_last=True), *tie_break]


def queue_page(user, params: QueryDict) -> Page:
    """One page of the queue; hidden jobs come out as HiddenJob, never as their row."""
    page = Paginator(queue_jobs(user, params), PAGE_SIZE).get_page(page_number(params))
    jobs = list(page.object_list)
    # Each row links to its cluster's address and is labelled with it: one small query,
    # not one per row.
    clusters = Cluster.objects.in_bulk()
    for job in jobs:
        job.cluster = clusters[job.cluster_id]
    attach_lost_work(jobs)  # hidden jobs too: the queries are the page's, whatever it holds
    mark_openable(user, jobs)
    page.object_list = [
        HiddenJob(job.slurm_id, job.partition, job.state) if job.hidden else job for job in jobs
    ]
    return page


def mark_openable(user, jobs: list[Job]) -> None:
    """Whether this person may open each job's page, so a row links only there: a
    researcher sees other people's jobs in the queue as squeue shows them, but their
    pages answer 404."""
    may_open = job_viewer(user)
    for job in jobs:
        job.openable = may_open(job)


def attach_lost_work(jobs: list[Job]) -> None:
    """Each job's estimated lost GPU-hours over its restarts, for the Lost work cell."""
    lost = lost_gpu_hours_by_job(jobs)
    for job in jobs:
        job.lost_gpu_hours = lost[job.pk]


def page_number(params: QueryDict) -> int:
    """The requested page as a number; anything else is page 1, and too big the last."""
    raw = params.get("page", "")
    if not (raw.isascii() and raw.isdigit()):
        return 1
    # Paginator clamps a page past the end; int() of thousands of digits would raise.
    return int(raw[:19])


def url_with(params: QueryDict, **changes) -> str:
    """`?…` for these params with some changed (None removes one)."""
    query = params.copy()
    for key, value in changes.items():
        query.pop(key, None)
        if value is not None:
            query[key] = str(value)
    return "?" + query.urlencode() if query else "?"


QUEUE_COLUMNS = (
    ("Job", "id"), ("Name", "name"), ("User", "user"), ("Partition", "partition"),
    ("State", "state"), ("Why", None), ("Nodes", None), ("GPUs", "gpus"),
    ("Restarts", "restarts"), ("GPU-hours", "gpu_hours"), ("Lost work (GPU-h)", None),
    ("Submitted", "submitted"),
)  # fmt: skip


def queue_context(user, params: QueryDict) -> dict:
    """What templates/jobs/queue.html renders: one page, its links, the filter choices."""
    page = queue_page(user, params)
    # Partitions are public even under PrivateData=jobs: the whole queue's, not only theirs.
    partitions = Job.objects.order_by("partition").values_list("partition", flat=True)
    return {
        "page": page,
        "jobs": page.object_list,
        "params": params,
        "columns": sort_columns(params),
        "page_links": page_links(params, page),
        "partitions": [name for name in partitions.distinct() if name],
    }


def sort_columns(params: QueryDict) -> list[dict]:
    """Each header's sort link keeps the filters; clicking the sorted column flips it."""
    sort, order = sort_of(params)
    columns = []
    for label, key in QUEUE_COLUMNS:
        column = {"label": label, "key": key, "url": None, "order": None}
        if key is not None:
            active = key == sort
            first = "desc" if key in DESCENDING_FIRST else "asc"
            flipped = "asc" if order == "desc" else "desc"
            column["order"] = order if active else None
            column["url"] = url_with(
                params, sort=key, order=flipped if active else first, page=None
            )
        columns.append(column)
    return columns


def page_links(params: QueryDict, page: Page) -> dict[str, str | None]:
    """First, previous, next and last, each keeping the filters and the sort."""

    def link(number: int) -> str:
        return url_with(params, page=number if number > 1 else None)

    before, after = page.has_previous(), page.has_next()
    return {
        "first": link(1) if before else None,
        "previous": link(page.previous_page_number()) if before else None,
        "next": link(page.next_page_number()) if after else None,
        "last": link(page.paginator.num_pages) if after else None,
    }
