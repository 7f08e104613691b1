"""Regions pushed over a page's socket: rendered by the view as the socket's user."""

import json
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.core.cache import cache
from django.test import Client

from clusters.backends.base import JobSubmission
from portal.consumers import LiveConsumer, parse_watch

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = ["jobs", "/jobs/?sort=-id", "job-rows"]


async def watching(user, topics: str, *entries) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(LiveConsumer.as_asgi(), f"/ws/live/?topics={topics}")
    comm.scope["user"] = user
    assert (await comm.connect())[0]
    await comm.send_to(text_data=json.dumps({"watch": list(entries)}))
    return comm


def fetched(user, url: str, target: str) -> str:
    """What the page's own htmx fetch of the region returns."""
    client = Client()
    client.force_login(user)
    response = client.get(url, HTTP_HX_REQUEST="true", HTTP_HX_TARGET=target)
    assert response.status_code == 200
    return response.content.decode()


def submit(sim, name: str, user: str) -> None:
    script = f"#SBATCH --job-name={name}\n#SBATCH --partition=train\n#SBATCH --gres=gpu:1\nsrun x\n"
    sim.submit_job(JobSubmission(script=script, user=user))


async def test_a_watched_queue_is_pushed_as_each_viewer_would_fetch_it(
    researcher, admin_user, sim, synced
):
    sim.private_data_kinds = frozenset({"jobs"})
    cache.clear()
    mine = await watching(researcher, "jobs", QUEUE)
    everything = await watching(admin_user, "jobs", QUEUE)
    submit(sim, "bobs-secret-run", "bob")
    await database_sync_to_async(synced)(timedelta(seconds=1))

    for comm, user in ((mine, researcher), (everything, admin_user)):
        message = json.loads(await comm.receive_from(timeout=5))
        assert message["push"] == "jobs" and message["url"] == QUEUE[1]
        assert isinstance(message["version"], int)
        page = await database_sync_to_async(fetched)(user, QUEUE[1], QUEUE[2])
        assert message["html"] == page
    assert "bobs-secret-run" in message["html"]  # the admin's
    await mine.disconnect()
    await everything.disconnect()


async def test_a_researcher_under_private_data_is_never_pushed_another_users_job(
    researcher, sim, synced
):
    sim.private_data_kinds = frozenset({"jobs"})
    cache.clear()
    comm = await watching(researcher, "jobs", QUEUE)
    submit(sim, "bobs-secret-run", "bob")
    await database_sync_to_async(synced)(timedelta(seconds=1))
    message = json.loads(await comm.receive_from(timeout=5))
    assert message["push"] == "jobs"
    assert "bobs-secret-run" not in message["html"]
    await comm.disconnect()


async def test_a_region_the_view_does_not_push_is_poked_for_the_page_to_fetch(
    admin_user, sim, synced
):
    """The approval queue holds forms (a CSRF token is the page's own): fetched, never pushed."""
    from clusters.models import Node
    from remediation import services
    from remediation.models import Trigger

    comm = await watching(
        admin_user, "remediation", ["runs", "/remediation/approvals/", "approval-queue"]
    )
    node = await database_sync_to_async(Node.objects.get)(name="gpu-02")
    run = await database_sync_to_async(services.create_run)(
        node, "drain", trigger=Trigger.ADMIN, reason="t"
    )
    # The run's own page is not watched here: poked at once; the queue after its check.
    assert json.loads(await comm.receive_from(timeout=5)) == {"poke": [f"run-{run.pk}"]}
    assert json.loads(await comm.receive_from(timeout=5)) == {"poke": ["runs"]}
    await comm.disconnect()


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        json.dumps({"watch": "jobs"}),
        json.dumps({"watch": [["jobs", "https://elsewhere.example/jobs/", "job-rows"]]}),
        json.dumps({"watch": [["jobs", "//elsewhere.example/jobs/", "job-rows"]]}),
        json.dumps({"watch": [["jobs", "/jobs/", "job rows"]]}),
        json.dumps({"watch": [["jobs", "/jobs/", 3]]}),
        json.dumps({"watch": [["r", "/x", "t"]] * 17}),
    ],
)
def test_a_watch_message_that_is_not_one_is_ignored(text):
    assert parse_watch(text) is None


def test_a_watch_message_names_regions_and_where_they_come_from():
    assert parse_watch(json.dumps({"watch": [QUEUE]})) == {"jobs": (QUEUE[1], QUEUE[2])}
