"""A poke gives each region it names a new version, once per trip, on every cache.

Renderings of a region are shared under its version (portal.regions): a version
that did not move would serve a page the rows from before the change. On Redis
the versions of a trip's regions are bumped in one round trip, through the client
behind Django's cache; these tests hold that to a real redis-server.
"""

from __future__ import annotations

import logging
import threading

import pytest

from core import live
from tests.chaos.services import PrivateRedis

pytestmark = pytest.mark.django_db

REDIS_PORT = 16398  # not the chaos suite's, which stops its own at will


class DiscardingLayer:
    async def group_send(self, group, message):
        pass


@pytest.fixture
def redis_cache(settings, tmp_path):
    redis = PrivateRedis(tmp_path, port=REDIS_PORT)
    redis.start()
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": redis.url,
            "KEY_PREFIX": "region-test",
        }
    }
    try:
        yield redis
    finally:
        redis.stop()


@pytest.fixture
def locmem_cache(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}


@pytest.fixture(autouse=True)
def no_layer(monkeypatch):
    monkeypatch.setattr(live, "get_channel_layer", lambda: DiscardingLayer())


def in_a_thread(target) -> None:
    # As a request's thread: Playwright's sync API, used by the browser tests of the
    # same process, leaves a running loop on the main one.
    errors = []

    def run():
        try:
            target()
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    assert errors == []


def poke_in_one_trip() -> None:
    with live.one_trip():
        live.poke("board", ["board-counts"])
        live.poke_node_pages(["gpu-01", "gpu-02"])
        live.poke("board", ["board-counts"])  # the same region again: one new version


@pytest.mark.integration
@pytest.mark.parametrize("cache", ["redis_cache", "locmem_cache"])
def test_a_trip_moves_each_poked_region_on_by_one_version(cache, request):
    request.getfixturevalue(cache)
    before = live.region_version("board-counts")
    assert live.region_version("node-gpu-02") == 0
    in_a_thread(poke_in_one_trip)
    assert live.region_version("board-counts") == before + 1
    assert live.region_version("node-gpu-01") == 1  # never bumped before: counted from 0
    assert live.region_version("node-gpu-02") == 1
    assert live.region_version("node-gpu-03") == 0
    in_a_thread(
        lambda: live.poke_many([("board", ["board-counts"]), ("node.gpu-01", ["node-gpu-01"])])
    )
    assert live.region_version("board-counts") == before + 2
    assert live.region_version("node-gpu-01") == 2


@pytest.mark.integration
def test_the_regions_of_a_trip_reach_redis_in_one_round_trip(redis_cache, monkeypatch):
    sent = []
    real = live.redis_client

    def counting_client():
        client = real()
        execute = client.execute_command
        client.execute_command = lambda *args, **kw: sent.append(args[0]) or execute(*args, **kw)
        pipeline = client.pipeline

        def counted_pipeline(**options):
            built = pipeline(**options)
            run = built.execute
            built.execute = lambda: sent.append("PIPELINE") or run()
            return built

        client.pipeline = counted_pipeline
        return client

    monkeypatch.setattr(live, "redis_client", counting_client)
    in_a_thread(poke_in_one_trip)
    assert sent == ["PIPELINE"]


def test_an_unreachable_cache_leaves_the_versions_and_still_sends_the_poke(
    settings, monkeypatch, caplog
):
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:9/0",  # the discard port: connection refused
        }
    }
    sent = []

    class RecordingLayer:
        async def group_send(self, group, message):
            sent.append((group, message["regions"]))

    monkeypatch.setattr(live, "get_channel_layer", lambda: RecordingLayer())
    with caplog.at_level(logging.WARNING, logger="core.live"):
        in_a_thread(poke_in_one_trip)
    assert "Versions of 3 region(s) not bumped" in caplog.text
    assert sent == [
        ("node.gpu-01", ["node-gpu-01"]),
        ("node.gpu-02", ["node-gpu-02"]),
        ("board", ["board-counts"]),
    ]
