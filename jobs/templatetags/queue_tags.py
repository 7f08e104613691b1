"""Template filters of the queue's rows (jobs/partials/job_row.html)."""

from django import template

from jobs.queue import gpu_hours_of

register = template.Library()


@register.filter
def gpu_hours(job) -> float | None:
    """The queue computes it in SQL; a live row or the job page computes the same here."""
    if "gpu_hours" in vars(job):
        return job.gpu_hours
    return gpu_hours_of(job)
