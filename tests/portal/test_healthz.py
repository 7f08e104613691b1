"""/healthz reports the database, Redis and the Slurm sync; error pages need no database."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import OperationalError
from django.test import Client
from django.utils import timezone

pytestmark = pytest.mark.django_db


def test_a_healthy_portal_says_ok_for_each_check(cluster):
    cluster.__class__.objects.filter(pk=cluster.pk).update(last_sync_at=timezone.now())

    response = Client().get("/healthz")

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert {"database", "redis", "slurm_sync"} <= set(body["checks"])
    assert body["checks"]["slurm_sync"]["clusters"]["test"]["ok"] is True


def test_an_unreachable_database_is_a_503(monkeypatch):
    from django.db import connection

    def broken():
        raise OperationalError("connection refused")

    monkeypatch.setattr(connection, "cursor", broken)

    response = Client().get("/healthz")

    assert response.status_code == 503
    assert response.json()["status"] == "down"
    assert response.json()["checks"]["database"]["ok"] is False


def test_an_unreachable_redis_is_a_503(settings, db):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
        }
    }

    response = Client().get("/healthz")

    assert response.status_code == 503
    assert response.json()["checks"]["redis"]["ok"] is False


def test_a_stale_sync_or_a_down_controller_is_degraded_but_still_serving(cluster):
    stale = timezone.now() - timedelta(minutes=10)
    cluster.__class__.objects.filter(pk=cluster.pk).update(last_sync_at=stale)

    response = Client().get("/healthz")

    assert response.status_code == 200
    assert response.json()["status"] == "degraded"
    assert response.json()["checks"]["slurm_sync"]["ok"] is False


def test_the_500_page_touches_neither_database_nor_session(researcher, django_assert_num_queries):
    from django.test import RequestFactory

    from portal.views import server_error

    client = Client()
    client.force_login(researcher)
    request = RequestFactory().get(
        "/", HTTP_COOKIE=f"sessionid={client.cookies['sessionid'].value}"
    )
    from django.contrib.auth.middleware import AuthenticationMiddleware
    from django.contrib.sessions.middleware import SessionMiddleware

    SessionMiddleware(lambda r: None).process_request(request)
    AuthenticationMiddleware(lambda r: None).process_request(request)

    with django_assert_num_queries(0):
        response = server_error(request)

    assert response.status_code == 500
    assert "Something went wrong" in response.content.decode()
