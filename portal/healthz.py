"""/healthz: can this portal serve, and is the Slurm picture fresh?

503 when the database (or Redis, when REDIS_URL is set) is unreachable: a load
balancer should stop sending requests this instance cannot answer. A stale or
failing Slurm sync is reported ("degraded") with a 200: it is the same for every
instance, and taking them all out of rotation would hide the board that says so.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.http import JsonResponse
from django.utils import timezone

logger = logging.getLogger(__name__)


def check_database() -> dict:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return {"ok": True}
    except Exception as error:  # any driver's connection error
        logger.warning("healthz: database unreachable: %s", error)
        return {"ok": False, "error": "database unreachable"}


def check_redis() -> dict:
    if not settings.REDIS_URL:
        return {"ok": True, "configured": False}
    try:
        cache.get("medbay:healthz")
        return {"ok": True}
    except Exception as error:  # redis-py's ConnectionError, TimeoutError...
        logger.warning("healthz: Redis unreachable: %s", error)
        return {"ok": False, "error": "Redis unreachable"}


def check_sync() -> dict:
    from clusters.models import Cluster

    stale_after = timedelta(seconds=max(30.0, 10 * settings.MEDBAY_SYNC_INTERVAL_S))
    now = timezone.now()
    clusters = {}
    for name, last_sync_at, controller_up in Cluster.objects.values_list(
        "name", "last_sync_at", "controller_up"
    ):
        age = (now - last_sync_at).total_seconds() if last_sync_at else None
        fresh = age is not None and age <= stale_after.total_seconds()
        clusters[name] = {
            "ok": bool(controller_up) and fresh,
            "controller_up": bool(controller_up),
            "last_sync_age_s": round(age, 1) if age is not None else None,
        }
    return {"ok": all(c["ok"] for c in clusters.values()), "clusters": clusters}


def healthz(request):
    checks = {"database": check_database(), "redis": check_redis()}
    if checks["database"]["ok"]:
        try:
            checks["slurm_sync"] = check_sync()
        except Exception as error:  # e.g. not migrated yet: reachable, but no answer
            logger.warning("healthz: cannot read the sync state: %s", error)
            checks["slurm_sync"] = {"ok": False, "error": "sync state unreadable"}
    else:
        checks["slurm_sync"] = {"ok": False, "error": "unknown: the database is unreachable"}
    serving = checks["database"]["ok"] and checks["redis"]["ok"]
    status = "ok" if serving and checks["slurm_sync"]["ok"] else "degraded"
    if not serving:
        status = "down"
    return JsonResponse({"status": status, "checks": checks}, status=200 if serving else 503)
