"""Chaos, in process: the Django cache (Redis in production) cannot be reached.

Log-in throttling and the Slurm command metrics live in the cache; without it
log-ins must still work (unthrottled) and /metrics must still answer, instead of
failing with a 500. tests/chaos/test_redis_outage.py does this on a real server.
"""

from __future__ import annotations

import pytest

from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

NOTHING_LISTENS = "redis://127.0.0.1:9/0"  # the discard port: connection refused


@pytest.fixture
def cache_down(settings):
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": NOTHING_LISTENS,
        }
    }


def test_logging_in_works_while_the_cache_is_unreachable(cache_down, researcher, client):
    reply = client.post("/login/", {"username": "alice", "password": PASSWORD})
    assert reply.status_code == 302
    assert client.get("/").status_code == 200


def test_a_wrong_password_is_refused_not_a_server_error_while_the_cache_is_unreachable(
    cache_down, researcher, client
):
    reply = client.post("/login/", {"username": "alice", "password": "wrong"})
    assert reply.status_code == 200
    assert "_auth_user_id" not in client.session


def test_metrics_answer_without_the_slurm_command_figures_while_the_cache_is_unreachable(
    cache_down, client
):
    reply = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert reply.status_code == 200
    assert b"medbay_slurm_command_duration_seconds" not in reply.content
