"""The one module that publishes to websockets.

Domain code calls these functions from `transaction.on_commit`, so a page never
shows a change that was rolled back. Each message is a server-rendered HTML
fragment with `hx-swap-oob`, which the htmx ws extension swaps in by id: the
same partial renders the page and the live update.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterable

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.template.loader import render_to_string

logger = logging.getLogger(__name__)

BOARD_GROUP = "board"
JOBS_GROUP = "jobs"
EVENTS_GROUP = "events"
REMEDIATION_GROUP = "remediation"
ALL_GROUPS = (BOARD_GROUP, JOBS_GROUP, EVENTS_GROUP, REMEDIATION_GROUP)

# The in-memory layer's queues belong to the event loop the consumers run in;
# a publisher on another thread (the demo's simulator) must hand messages to
# that loop instead of creating its own.
_consumer_loop: asyncio.AbstractEventLoop | None = None


def register_consumer_loop(loop: asyncio.AbstractEventLoop) -> None:
    global _consumer_loop
    _consumer_loop = loop


def send_html(group: str, html: str) -> None:
    """Send one fragment to every socket in `group`; failures never break a caller."""
    if not html:
        return
    try:
        _group_send(group, {"type": "live.html", "html": html})
    except Exception:  # a dead Redis must not fail the request that changed state
        logger.warning("Live update to %s not delivered", group, exc_info=True)


def _group_send(group: str, message: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is not None:
        running.create_task(layer.group_send(group, message))
        return
    loop = _consumer_loop
    in_loop_thread = loop is not None and getattr(loop, "_thread_id", None) == threading.get_ident()
    if (
        isinstance(layer, InMemoryChannelLayer)
        and loop
        and loop.is_running()
        and not in_loop_thread
    ):
        asyncio.run_coroutine_threadsafe(layer.group_send(group, message), loop).result(timeout=5)
        return
    async_to_sync(layer.group_send)(group, message)


def publish_nodes(node_ids: Iterable[int]) -> None:
    from clusters.board import BoardFilter, board_rows, cluster_gpu_counts, render_tiles

    node_ids = list(node_ids)
    if not node_ids:
        return
    rows, gpus = board_rows(BoardFilter(), node_ids=node_ids)
    tiles = render_tiles(rows, gpus, oob=True)
    counts = render_to_string(
        "clusters/partials/counts.html", {"counts": cluster_gpu_counts(), "oob": True}
    )
    send_html(BOARD_GROUP, counts + tiles)


def publish_jobs(job_ids: Iterable[int], new_ids: Iterable[int] = ()) -> None:
    from jobs.live import job_fragments_by_group
    from jobs.models import Job

    job_ids = list(job_ids)
    if job_ids:
        for group, html in job_fragments_by_group(job_ids, set(new_ids)).items():
            send_html(group, html)
        shown = Job.objects.filter(pk__in=job_ids).values_list("cluster_id", "slurm_id")
        for cluster_id, slurm_id in shown:
            poke_job_pages(cluster_id, [slurm_id])


def job_page_group(cluster_id: int, slurm_id: int) -> str:
    """The sockets of the pages that show one job (its detail page)."""
    return f"job.{int(cluster_id)}.{int(slurm_id)}"


def poke_job_pages(cluster_id: int, slurm_ids: Iterable[int]) -> None:
    """Tell open pages of these jobs to fetch their story again.

    The story (restarts, timeline, facts) takes several queries to build, and a
    sync cycle changes hundreds of jobs that nobody is looking at; so the page
    gets a one-line fragment that makes htmx fetch the story, and only pages
    that are open pay for it.
    """
    for slurm_id in sorted({int(slurm_id) for slurm_id in slurm_ids}):
        html = render_to_string("jobs/partials/story_poke.html", {"slurm_id": slurm_id})
        send_html(job_page_group(cluster_id, slurm_id), html)


def publish_banner(cluster_id: int) -> None:
    from clusters.models import Cluster

    cluster = Cluster.objects.filter(pk=cluster_id).first()
    html = render_to_string("clusters/partials/banner.html", {"cluster": cluster, "oob": True})
    send_html(BOARD_GROUP, html)


def publish_fragment(group: str, template: str, context: dict) -> None:
    send_html(group, render_to_string(template, {**context, "oob": True}))
