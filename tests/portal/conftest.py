"""Fixtures for the portal's live-socket tests."""

from __future__ import annotations

import pytest
from channels.layers import channel_layers

from tests.chaos.services import PrivateRedis


@pytest.fixture
def redis_layer(request, settings, tmp_path):
    """A private Redis as the cache and the channel layer, on the test module's own
    REDIS_PORT so that suites running side by side never share one."""
    redis = PrivateRedis(tmp_path, port=request.module.REDIS_PORT)
    redis.start()
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": redis.url}
    }
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [redis.url]},
        }
    }
    channel_layers.backends.clear()
    try:
        yield redis
    finally:
        channel_layers.backends.clear()
        redis.stop()
