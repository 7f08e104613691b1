"""Job-queue fragments for live updates (rows swapped in by id)."""

from __future__ import annotations

from django.template.loader import render_to_string

from jobs.models import Job


def render_job_rows(job_ids: list[int]) -> str:
    jobs = Job.objects.filter(pk__in=job_ids).order_by("-slurm_id")
    return "".join(
        render_to_string("jobs/partials/job_row.html", {"job": job, "oob": True}) for job in jobs
    )
