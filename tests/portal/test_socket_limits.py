"""One person's sockets cannot deny live updates to everyone else (issue #26, item 3).

alice once opened 120 sockets, each watching 16 regions at addresses made unique
by a junk parameter: every change cost a rendering per socket and region, on the
one thread channels gives database work, and bob's handshake waited 4-5 s.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import close_old_connections
from django.test import Client
from django.test.signals import template_rendered
from redis import Redis

from clusters.backends.base import JobSubmission
from portal.consumers import LiveConsumer, parse_watch
from tests.portal.test_settings import run_check

pytestmark = pytest.mark.django_db(transaction=True)

ROWS = "jobs/partials/job_rows.html"
REDIS_PORT = 16396  # not the chaos suite's, nor the region or watched-page tests'


def communicator(user, topics="jobs") -> WebsocketCommunicator:
    comm = WebsocketCommunicator(LiveConsumer.as_asgi(), f"/ws/live/?topics={topics}")
    comm.scope["user"] = user
    return comm


async def watching(user, url: str) -> WebsocketCommunicator:
    comm = communicator(user)
    assert (await comm.connect())[0]
    await comm.send_to(text_data=json.dumps({"watch": [["jobs", url, "job-rows"]]}))
    return comm


def submit(sim, name: str) -> None:
    script = f"#SBATCH --job-name={name}\n#SBATCH --partition=train\n#SBATCH --gres=gpu:1\nsrun x\n"
    sim.submit_job(JobSubmission(script=script, user="alice"))


async def a_job_arrives(sim, synced, name: str) -> None:
    """A change that pokes the job queue, as the sync publishes it."""
    submit(sim, name)
    await database_sync_to_async(synced)(timedelta(seconds=1))


def fetched(user, url: str) -> str:
    """What the page's own htmx fetch of its rows returns."""
    client = Client()
    client.force_login(user)
    response = client.get(url, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="job-rows")
    assert response.status_code == 200
    return response.content.decode()


class RowRenderings:
    """Counts renderings of the queue's rows, on whichever thread they happen; HOLD
    keeps those off the test's own thread waiting (renders in flight) until released."""

    def __init__(self, hold: bool = False) -> None:
        self.count = 0
        self.started = threading.Event()
        self.release = threading.Event()
        if not hold:
            self.release.set()
        self.main = threading.get_ident()

    def __call__(self, sender, template, context, **kwargs) -> None:
        if template.name == ROWS:
            self.count += 1
            if threading.get_ident() != self.main:
                self.started.set()
                self.release.wait(timeout=30)


@pytest.fixture
def renderings():
    counters = []

    def counting(hold: bool = False) -> RowRenderings:
        counter = RowRenderings(hold)
        template_rendered.connect(counter)
        counters.append(counter)
        return counter

    yield counting
    for counter in counters:
        counter.release.set()
        template_rendered.disconnect(counter)


async def test_a_person_past_the_socket_cap_is_closed_with_4429_and_others_connect(
    researcher, manager, settings
):
    settings.MEDBAY_SOCKETS_PER_USER = 3
    alices = [communicator(researcher) for _ in range(3)]
    for comm in alices:
        assert (await comm.connect())[0]

    one_too_many = communicator(researcher)
    assert (await one_too_many.connect())[0]  # accepted: a close code needs an open socket
    assert await one_too_many.receive_output(timeout=2) == {
        "type": "websocket.close",
        "code": 4429,
    }
    bob = communicator(manager)
    assert (await bob.connect(timeout=2))[0]

    await alices[0].disconnect()  # a seat given back is free again
    again = communicator(researcher)
    assert (await again.connect())[0]
    assert await again.receive_nothing(timeout=0.2)
    for comm in (*alices[1:], again, bob):
        await comm.disconnect()


async def test_a_handshake_never_waits_behind_renders_in_flight(
    researcher, manager, sim, synced, renderings
):
    held = renderings(hold=True)
    alices = [await watching(researcher, f"/jobs/?sort=-id&n={n}") for n in range(4)]
    await a_job_arrives(sim, synced, "slow-rows")
    assert await sync_to_async(held.started.wait, thread_sensitive=False)(10), "none started"

    bob = communicator(manager)
    started = time.monotonic()
    connected, _ = await bob.connect(timeout=3)
    assert connected
    assert time.monotonic() - started < 1

    held.release.set()
    for comm in alices:
        assert json.loads(await comm.receive_from(timeout=10))["push"] == "jobs"
        await comm.disconnect()
    await bob.disconnect()


async def test_junk_parameters_share_one_rendering_of_a_pushed_region(
    researcher, sim, synced, settings, renderings
):
    settings.MEDBAY_RENDERS_IN_FLIGHT = 1  # one at a time: the second finds the first's
    first = await watching(researcher, "/jobs/?sort=gpu_hours&z=first")
    await a_job_arrives(sim, synced, "a")
    assert json.loads(await first.receive_from(timeout=5))["push"] == "jobs"

    urls = [f"/jobs/?sort=gpu_hours&z={n}" for n in range(6)]
    sockets = [first] + [await watching(researcher, url) for url in urls[1:]]
    await first.send_to(text_data=json.dumps({"watch": [["jobs", urls[0], "job-rows"]]}))
    counted = renderings()
    await a_job_arrives(sim, synced, "b")
    pushes = [json.loads(await comm.receive_from(timeout=5)) for comm in sockets]

    assert counted.count == 1
    assert [push["url"] for push in pushes] == urls  # each page's own address
    page = await database_sync_to_async(fetched)(researcher, urls[3])
    assert {push["html"] for push in pushes} == {page}
    for comm in sockets:
        await comm.disconnect()


async def test_a_parameter_the_view_reads_is_never_dropped_from_a_push(researcher, sim, synced):
    running = await watching(researcher, "/jobs/?state=RUNNING&z=1")
    pending = await watching(researcher, "/jobs/?state=PENDING&z=2")
    for round_name in ("a", "b"):  # the second round renders at the view's own parameters
        await a_job_arrives(sim, synced, round_name)
        for comm, url in (
            (running, "/jobs/?state=RUNNING&z=1"),
            (pending, "/jobs/?state=PENDING&z=2"),
        ):
            push = json.loads(await comm.receive_from(timeout=5))
            assert push["html"] == await database_sync_to_async(fetched)(researcher, url)
    await running.disconnect()
    await pending.disconnect()


def test_a_socket_watches_at_most_the_regions_its_setting_allows(settings):
    settings.MEDBAY_WATCHES_PER_SOCKET = 2
    entries = [[f"r{n}", "/jobs/", "job-rows"] for n in range(3)]
    assert parse_watch(json.dumps({"watch": entries[:2]})) is not None
    assert parse_watch(json.dumps({"watch": entries})) is None


@pytest.mark.parametrize(
    "name", ["MEDBAY_SOCKETS_PER_USER", "MEDBAY_WATCHES_PER_SOCKET", "MEDBAY_RENDERS_IN_FLIGHT"]
)
def test_a_socket_limit_below_one_stops_start_up_naming_it(name):
    result = run_check(DEBUG="true", **{name: "0"})
    assert result.returncode != 0
    assert f"{name} must be at least 1" in result.stderr


@pytest.mark.integration
async def test_a_burst_of_sockets_opening_and_closing_at_once_keeps_within_the_redis_pool(
    researcher, redis_layer, settings, caplog
):
    settings.MEDBAY_SOCKETS_PER_USER = 1000
    burst = [communicator(researcher, "jobs,events,board,remediation") for _ in range(150)]
    with caplog.at_level(logging.WARNING):
        opened = await asyncio.gather(*(comm.connect(timeout=20) for comm in burst))
        assert all(connected for connected, _ in opened)
        await asyncio.gather(*(comm.disconnect(timeout=20) for comm in burst))

    assert "Too many connections" not in caplog.text  # redis-py's MaxConnectionsError
    redis = Redis.from_url(redis_layer.url)
    for group in ("jobs", "events", "board", "remediation", f"user.{researcher.pk}"):
        assert redis.zcard(f"asgi:group:{group}") == 0, group  # every socket left
    # channels' communicator keeps the database thread's connection open while it waits;
    # closed here, or PostgreSQL refuses to drop the test database at the end.
    await database_sync_to_async(close_old_connections)()


@pytest.mark.integration
async def test_the_socket_cap_counts_a_persons_sockets_on_every_process(
    researcher, redis_layer, settings
):
    """Two processes share the count through Redis: each here is one socket's seat."""
    from portal import sockets

    settings.MEDBAY_SOCKETS_PER_USER = 2
    take = sync_to_async(sockets.take_seat, thread_sensitive=False)
    assert await take(researcher.pk, "process-a.socket-1")
    assert await take(researcher.pk, "process-b.socket-1")
    assert not await take(researcher.pk, "process-b.socket-2")
    await sync_to_async(sockets.give_up_seat)(researcher.pk, "process-a.socket-1")
    assert await take(researcher.pk, "process-b.socket-2")
