"""Pokes go to the pages of jobs and nodes that someone has open, and to no others.

A sync cycle of a 60,000-job cluster changes thousands of jobs nobody looks at; on
the Redis layer each send costs round trips whether or not a socket is in the
group. A socket notes the page groups it joins (core.live.note_watched) and a
publisher sends only to those, except when it cannot tell: then to all, as a
send too many costs less than a page left stale. On a real redis-server, as the
layer and the cache, as in production.
"""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.layers import channel_layers
from channels.testing import WebsocketCommunicator
from django.core.cache import cache

from core import live
from portal.consumers import LiveConsumer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

REDIS_PORT = 16397  # neither the chaos suite's nor the region tests'


@pytest.fixture
def sent_to(redis_layer, monkeypatch):
    """The groups the layer was asked to send to, in order."""
    layer = channel_layers["default"]
    groups, send = [], layer.group_send

    async def recording(group, message):
        groups.append(group)
        await send(group, message)

    monkeypatch.setattr(layer, "group_send", recording)
    return groups


def page(user, topic: str) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(LiveConsumer.as_asgi(), f"/ws/live/?topics={topic}")
    comm.scope["user"] = user
    return comm


async def poke_node_pages(*names: str) -> None:
    # From a thread without an event loop, as a sync cycle or an engine worker.
    await sync_to_async(live.poke_node_pages, thread_sensitive=False)(names)


async def test_only_the_open_nodes_page_is_poked(researcher, sent_to):
    gpu_01 = page(researcher, "node:gpu-01")
    assert (await gpu_01.connect())[0]

    await poke_node_pages("gpu-01", "gpu-02", "gpu-03")

    assert await gpu_01.receive_from(timeout=5) == '{"poke": ["node-gpu-01"]}'
    assert sent_to == ["node.gpu-01"]
    await gpu_01.disconnect()


async def test_a_page_whose_socket_stopped_renewing_an_hour_ago_is_no_longer_sent_to(
    researcher, sent_to
):
    gpu_01 = page(researcher, "node:gpu-01")
    assert (await gpu_01.connect())[0]
    await poke_node_pages("gpu-01")
    assert sent_to == ["node.gpu-01"]

    def lapse() -> None:  # as if its web process had been killed an hour ago
        client = live.redis_client()
        client.zadd(cache.make_and_validate_key(live.WATCHED_KEY), {"node.gpu-01": 1.0})

    await sync_to_async(lapse)()
    await poke_node_pages("gpu-01")
    assert sent_to == ["node.gpu-01"]
    await gpu_01.disconnect()


async def test_every_page_is_sent_to_while_who_watches_cannot_be_known(
    researcher, sent_to, settings
):
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:9/0",  # the discard port: connection refused
        }
    }
    await poke_node_pages("gpu-01", "gpu-02")
    assert sent_to == ["node.gpu-01", "node.gpu-02"]
