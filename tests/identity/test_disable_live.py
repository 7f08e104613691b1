"""Disabling someone closes the live sockets they have open, through the real consumer."""

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.core.management import call_command

from portal.consumers import LiveConsumer

pytestmark = pytest.mark.django_db(transaction=True)


async def test_disable_closes_the_users_open_sockets_as_a_log_out(researcher, manager):
    theirs = WebsocketCommunicator(LiveConsumer.as_asgi(), "/ws/live/?topics=events")
    theirs.scope["user"] = researcher
    others = WebsocketCommunicator(LiveConsumer.as_asgi(), "/ws/live/?topics=events")
    others.scope["user"] = manager
    assert (await theirs.connect())[0] and (await others.connect())[0]

    await database_sync_to_async(call_command)("medbay_user", "disable", "alice")

    assert (await theirs.receive_output(timeout=2)) == {"type": "websocket.close", "code": 4401}
    assert await others.receive_nothing(timeout=0.5)
    await others.disconnect()
