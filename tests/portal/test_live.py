"""Live updates reach logged-in users over the websocket, and nobody else."""

import asyncio

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from portal.consumers import LiveConsumer

pytestmark = pytest.mark.django_db(transaction=True)


def communicator(user, topics="board") -> WebsocketCommunicator:
    comm = WebsocketCommunicator(LiveConsumer.as_asgi(), f"/ws/live/?topics={topics}")
    comm.scope["user"] = user
    return comm


async def test_a_node_state_change_reaches_a_logged_in_client(researcher, sim, synced):
    comm = communicator(researcher)
    connected, _ = await comm.connect()
    assert connected
    sim.drain_node("gpu-02", "medbay: XID 79 GPU 3 fallen off the bus [run 42]")
    await database_sync_to_async(synced)()
    html = await comm.receive_from(timeout=2)
    assert 'id="node-gpu-02"' in html
    assert 'hx-swap-oob="true"' in html
    assert "status-drained" in html
    # Each board counts what its own filters show, so it is told to fetch its counts.
    assert await comm.receive_from(timeout=2) == '{"poke": ["board-counts"]}'
    await comm.disconnect()


async def test_an_anonymous_client_is_refused(db):
    comm = communicator(AnonymousUser())
    connected, code = await comm.connect()
    assert not connected
    assert code == 4401


async def test_a_user_without_a_role_is_refused(django_user_model):
    user = await sync_to_async(django_user_model.objects.create_user)("nobody", password="x" * 12)
    comm = communicator(user)
    connected, code = await comm.connect()
    assert not connected
    assert code == 4403


async def test_clients_only_get_the_topics_they_asked_for(researcher, sim, synced):
    jobs_only = communicator(researcher, topics="jobs")
    assert (await jobs_only.connect())[0]
    sim.drain_node("gpu-01", "medbay: test")
    await database_sync_to_async(synced)()
    await asyncio.sleep(0.1)
    assert await jobs_only.receive_nothing(timeout=0.3)
    await jobs_only.disconnect()


async def test_a_researchers_socket_carries_no_job_data_only_a_poke(
    researcher, admin_user, sim, synced
):
    """The queue refetches its rows through its view (PrivateData applied there), so
    what a socket carries names the region that changed and nothing of the job."""
    import json
    from datetime import timedelta

    from clusters.backends.base import JobSubmission

    mine, everything = communicator(researcher, "jobs"), communicator(admin_user, "jobs")
    assert (await mine.connect())[0] and (await everything.connect())[0]
    script = (
        "#SBATCH --job-name=bobs-secret-run\n#SBATCH --partition=train\n"
        "#SBATCH --gres=gpu:1\nsrun x\n"
    )
    sim.submit_job(JobSubmission(script=script, user="bob"))
    await database_sync_to_async(synced)(timedelta(seconds=1))
    for comm in (mine, everything):
        message = await comm.receive_from(timeout=2)
        assert json.loads(message) == {"poke": ["jobs"]}
        assert "bob" not in message
    await mine.disconnect()
    await everything.disconnect()


async def test_logging_out_closes_that_sessions_open_sockets(researcher):
    from django.contrib.auth.signals import user_logged_out
    from django.contrib.sessions.backends.db import SessionStore
    from django.test import RequestFactory

    session = SessionStore()
    await sync_to_async(session.create)()
    comm = communicator(researcher, "events")
    comm.scope["session"] = session
    assert (await comm.connect())[0]
    request = RequestFactory().post("/logout/")
    request.session = session

    await sync_to_async(user_logged_out.send)(
        sender=type(researcher), request=request, user=researcher
    )

    assert (await comm.receive_output(timeout=2)) == {"type": "websocket.close", "code": 4401}


async def test_a_change_of_roles_closes_the_users_sockets(researcher):
    comm = communicator(researcher, "events")
    assert (await comm.connect())[0]

    def drop_roles():
        researcher.groups.clear()

    await database_sync_to_async(drop_roles)()

    assert (await comm.receive_output(timeout=2)) == {"type": "websocket.close", "code": 4403}


async def test_a_live_channel_that_fails_closes_with_try_again_later_not_a_500(
    researcher, settings
):
    from channels.layers import channel_layers

    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # Nothing listens on port 9: the layer fails as with Redis stopped.
            "CONFIG": {"hosts": [("127.0.0.1", 9)]},
        }
    }
    channel_layers.backends.clear()
    try:
        comm = communicator(researcher, "events")
        connected, code = await comm.connect(timeout=5)
        if connected:
            closed = await comm.receive_output(timeout=5)
            assert closed == {"type": "websocket.close", "code": 4013}
        else:
            assert code == 4013
    finally:
        channel_layers.backends.clear()


async def test_an_open_socket_stays_in_its_groups_past_the_layers_group_expiry(
    researcher, settings, monkeypatch
):
    from channels.layers import channel_layers

    from portal import consumers

    # The layer forgets members after a second; the socket renews every 0.2 s.
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels.layers.InMemoryChannelLayer",
            "CONFIG": {"group_expiry": 1},
        }
    }
    channel_layers.backends.clear()
    monkeypatch.setattr(consumers, "GROUP_RENEW_S", 0.2)
    try:
        comm = communicator(researcher)
        assert (await comm.connect())[0]
        await asyncio.sleep(1.5)  # the time the expiry is about, not a wait for a state
        await channel_layers["default"].group_send("board", {"type": "live.html", "html": "<p>"})
        assert await comm.receive_from(timeout=2) == "<p>"
        await comm.disconnect()
    finally:
        channel_layers.backends.clear()


def test_a_region_is_rendered_once_per_version_for_viewers_who_see_it_alike(admin_user, manager):
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from core import live

    def viewer(user):
        logged_in = Client()
        logged_in.force_login(user)
        return logged_in

    def feed(logged_in):
        return logged_in.get("/health/events/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="event-rows")

    def event_queries(logged_in) -> int:
        with CaptureQueriesContext(connection) as captured:
            feed(logged_in)
        return sum("health_healthevent" in query["sql"] for query in captured)

    admin, watcher = viewer(admin_user), viewer(manager)
    assert event_queries(admin) == 1
    assert event_queries(watcher) == 0  # the admin's rendering, served again
    live.poke(live.EVENTS_GROUP, ["events"])
    assert event_queries(watcher) == 1  # a new version is rendered again
