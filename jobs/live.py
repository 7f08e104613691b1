"""Job-queue fragments for live updates.

Rows are swapped in by id (`job-<slurm_id>`); jobs that are new to the queue
are prepended. Each fragment goes to the admins' and managers' group and to
the owner's own group, so a researcher's browser never receives other people's
jobs.
"""

from __future__ import annotations

import re
from collections import defaultdict

from django.template.loader import render_to_string

from jobs.models import Job
from jobs.queue import attach_lost_work

ALL_JOBS_GROUP = "jobs"


def user_jobs_group(unix_user: str) -> str:
    # Channel group names allow only ASCII letters, digits, '-', '_' and '.'.
    return "jobs.user." + re.sub(r"[^A-Za-z0-9_.-]", "_", unix_user)[:80]


def job_fragments_by_group(job_ids: list[int], new_ids: set[int]) -> dict[str, str]:
    fragments: dict[str, list[str]] = defaultdict(list)
    jobs = list(Job.objects.filter(pk__in=job_ids).order_by("slurm_id"))
    attach_lost_work(jobs)
    for job in jobs:
        row = render_to_string(
            "jobs/partials/job_row.html", {"job": job, "oob": job.pk not in new_ids}
        )
        if job.pk in new_ids:
            row = (
                f'<tr id="job-{job.slurm_id}" hx-swap-oob="delete"></tr>'
                f'<tbody id="job-rows" hx-swap-oob="afterbegin">{row}</tbody>'
            )
        fragments[ALL_JOBS_GROUP].append(row)
        fragments[user_jobs_group(job.user)].append(row)
    return {group: "".join(rows) for group, rows in fragments.items()}
