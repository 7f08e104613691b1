"""An open socket lives only as long as the session that opened it (issue #26, item 4).

A superuser reset a researcher's password, or unticked is_active in /admin/: her
pages were sent to /login/, but her open socket kept receiving pushes rendered
as her. Through the portal's real websocket stack: its session cookie, its
authentication, its consumer.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.contrib.sessions.backends.db import SessionStore
from django.contrib.sessions.models import Session
from django.test import Client
from django.utils import timezone

from clusters.backends.base import JobSubmission
from identity.models import ApiToken

pytestmark = pytest.mark.django_db(transaction=True)

LOGGED_OUT = {"type": "websocket.close", "code": 4401}


def logged_in(user) -> str:
    """A new session of USER, made by Django's own log-in; its key."""
    client = Client()
    client.force_login(user)
    return client.session.session_key


def application():
    from portal.asgi import application

    return application


async def opened(
    session_key: str | None, topics: str = "events", **headers
) -> WebsocketCommunicator:
    """A socket opened as a browser opens it: its cookie, its origin."""
    sent = [(b"origin", b"http://testserver")]
    if session_key:
        sent.append((b"cookie", f"{django_settings.SESSION_COOKIE_NAME}={session_key}".encode()))
    sent += [(name.encode(), value.encode()) for name, value in headers.items()]
    comm = WebsocketCommunicator(application(), f"/ws/live/?topics={topics}", headers=sent)
    connected, code = await comm.connect()
    assert connected, code
    return comm


async def test_disabling_an_account_closes_its_sockets_and_no_one_elses(researcher, manager):
    hers, theirs = await opened(await sync_to_async(logged_in)(researcher)), None
    theirs = await opened(await sync_to_async(logged_in)(manager))

    def untick_active():  # what /admin/ does: the user saved with is_active off
        researcher.is_active = False
        researcher.save()

    await database_sync_to_async(untick_active)()

    assert await hers.receive_output(timeout=5) == LOGGED_OUT
    assert await theirs.receive_nothing(timeout=0.5)
    await theirs.disconnect()


async def test_a_new_password_closes_the_sockets_of_every_session_it_ends(researcher, manager):
    """Django ends every session made with the old password; the changer's own
    continues under a new key (update_session_auth_hash), so its sockets go too."""
    sessions = [await opened(await sync_to_async(logged_in)(researcher)) for _ in range(2)]
    others = await opened(await sync_to_async(logged_in)(manager))

    def set_password():  # as /admin/'s password form and `set_password` callers do
        researcher.set_password("a-brand-new-password-42")
        researcher.save()

    await database_sync_to_async(set_password)()

    for comm in sessions:
        assert await comm.receive_output(timeout=5) == LOGGED_OUT
    assert await others.receive_nothing(timeout=0.5)
    await others.disconnect()


async def test_a_save_that_changes_neither_password_nor_access_leaves_the_sockets_open(
    researcher,
):
    comm = await opened(await sync_to_async(logged_in)(researcher))

    def rename():
        researcher.first_name = "Alice"
        researcher.save()

    await database_sync_to_async(rename)()

    assert await comm.receive_nothing(timeout=1)
    await comm.disconnect()


async def test_a_flushed_session_closes_its_sockets_and_leaves_the_persons_others(researcher):
    keys = [await sync_to_async(logged_in)(researcher) for _ in range(2)]
    flushed, other = [await opened(key) for key in keys]

    await database_sync_to_async(SessionStore(keys[0]).flush)()

    assert await flushed.receive_output(timeout=5) == LOGGED_OUT
    assert await other.receive_nothing(timeout=0.5)
    await other.disconnect()


async def test_a_push_is_never_rendered_for_a_session_that_no_longer_logs_in(
    researcher, sim, synced, monkeypatch
):
    from django.contrib.auth import get_user_model

    from portal import consumers

    monkeypatch.setattr(consumers, "SESSION_RECHECK_S", 0)  # asked before every push
    comm = await opened(await sync_to_async(logged_in)(researcher), topics="jobs")
    await comm.send_to(text_data=json.dumps({"watch": [["jobs", "/jobs/", "job-rows"]]}))
    # A bulk update sends no signal: only the socket's own check can tell.
    await database_sync_to_async(get_user_model().objects.filter(pk=researcher.pk).update)(
        is_active=False
    )
    script = "#SBATCH --job-name=after-disable\n#SBATCH --partition=train\nsrun x\n"
    sim.submit_job(JobSubmission(script=script, user="alice"))
    await database_sync_to_async(synced)(timedelta(seconds=1))

    assert await comm.receive_output(timeout=5) == LOGGED_OUT


async def test_a_socket_whose_session_expired_closes_by_itself(researcher, monkeypatch):
    from portal import consumers, sockets

    monkeypatch.setattr(sockets, "SEAT_RENEW_S", 0.2)  # the minute's own check, sooner
    monkeypatch.setattr(consumers, "SESSION_RECHECK_S", 0)
    key = await sync_to_async(logged_in)(researcher)
    comm = await opened(key)
    an_hour_ago = timezone.now() - timedelta(hours=1)
    await database_sync_to_async(Session.objects.filter(session_key=key).update)(
        expire_date=an_hour_ago
    )

    assert await comm.receive_output(timeout=5) == LOGGED_OUT


async def test_an_api_token_opens_no_socket_so_revoking_one_leaves_none_open(researcher):
    """Sockets are opened by a session only: a token, revoked or not, never holds one."""
    from identity import accounts

    token, raw = await database_sync_to_async(accounts.issue_api_token)(researcher, "script")
    comm = WebsocketCommunicator(
        application(),
        "/ws/live/?topics=events",
        headers=[(b"origin", b"http://testserver"), (b"authorization", f"Token {raw}".encode())],
    )
    assert await comm.connect() == (False, 4401)
    await database_sync_to_async(accounts.revoke_api_token)(researcher, token.pk)
    assert await database_sync_to_async(ApiToken.objects.filter(revoked_at=None).count)() == 0
