"""What job changes tell open pages: the queues and the pages of the jobs that changed.

Pages are poked and fetch their rows through the queue view, so every row a
socket leads to is rendered for its viewer, with PrivateData applied, and never
sent to anyone else.
"""

from __future__ import annotations

from collections.abc import Iterable

from core import live
from jobs.models import Job


def publish_jobs(job_ids: Iterable[int], new_ids: Iterable[int] = ()) -> None:
    """Jobs changed, appeared or left: open queues fetch their page again (with their
    own sort, filters and page, so a new job lands in its place and a finished one
    leaves a filtered view), and open pages of these jobs fetch their story."""
    job_ids = list(job_ids)
    if not job_ids:
        return
    shown = sorted(set(Job.objects.filter(pk__in=job_ids).values_list("cluster_id", "slurm_id")))
    # The queues of all clusters and of these jobs' clusters; not those of another cluster.
    queues = live.cluster_groups(live.JOBS_GROUP, (cluster_id for cluster_id, _ in shown))
    live.poke_many((group, [live.JOBS_REGION]) for group in queues)
    live.poke_many(
        (live.job_page_group(cluster_id, slurm_id), [f"job-{slurm_id}"])
        for cluster_id, slurm_id in shown
    )


def poke_job_pages(cluster_id: int, slurm_ids: Iterable[int]) -> None:
    """Tell open pages of these jobs to fetch their story again.

    The story (restarts, timeline, facts) takes several queries to build, and a
    sync cycle changes hundreds of jobs that nobody is looking at; so the page
    is poked and fetches its story itself: only pages that are open pay for it.
    """
    live.poke_many(
        (live.job_page_group(cluster_id, slurm_id), [f"job-{slurm_id}"])
        for slurm_id in sorted({int(slurm_id) for slurm_id in slurm_ids})
    )
