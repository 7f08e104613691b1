"""Shared set-up for benchmarks: Django on the configured database, synthetic data."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent


def _load_the_standard_librarys_queue() -> None:
    """bench/queue.py (the benchmark's contract name) shadows the standard library's
    `queue`, which psycopg, asyncio and concurrent.futures import, whenever a
    script here runs with bench/ first on sys.path: load the real one first."""
    if "queue" in sys.modules:
        return
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH]
    try:
        import queue  # noqa: F401
    finally:
        sys.path[:] = saved


_load_the_standard_librarys_queue()


def django_setup() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("SECRET_KEY", "medbay-benchmark-key-not-secret")
    os.environ.setdefault("DEBUG", "false")
    os.environ.setdefault("SECURE_SSL_REDIRECT", "false")
    os.environ.setdefault("DB_CONN_MAX_AGE", "0")
    # One benchmark user watches every board (fanout: thousands); the workers inherit it.
    os.environ.setdefault("MEDBAY_SOCKETS_PER_USER", "100000")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    _empty_channel_layer()


def _empty_channel_layer() -> None:
    """Start from a Redis channel layer with no groups. Workers a benchmark stops leave
    their sockets in the groups for the layer's group expiry (a day): after a few runs of
    `fanout` every board update went to thousands of dead sockets, 13 ms a send, and each
    `storm` run was slower than the one before."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is not None and hasattr(layer, "flush"):
        async_to_sync(layer.flush)()


def session_cookie(username: str) -> str:
    """A `Cookie` header value that logs USERNAME (a researcher, made if missing) in."""
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    from core.roles import Role
    from identity.accounts import create_user_with_role

    user, _ = create_user_with_role(username, Role.RESEARCHER)
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return f"{settings.SESSION_COOKIE_NAME}={session.session_key}"


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


def seed_cluster(name: str, nodes: int, *, seed: int = 1, rounds: int | None = None):
    """A simulated cluster of `nodes` 8-GPU nodes with a workload (`rounds` minutes of
    job arrivals, nodes / 4 unless given), synced to the DB."""
    from datetime import timedelta

    from clusters.backends.simulated import SimulatedCluster
    from clusters.models import Cluster
    from sync.cycle import apply_snapshot

    Cluster.objects.filter(name=name).delete()
    cluster = Cluster.objects.create(name=name)
    spare = max(1, nodes // 16)
    sim = SimulatedCluster.standard(
        train=nodes - 2 * spare, infer=spare, spare=spare, seed=seed, prefix="bench"
    )
    sim.fault_rate_per_gpu_day = 0
    for _ in range(nodes // 4 if rounds is None else rounds):
        sim.generate_workload()
        sim.advance(timedelta(minutes=1))
    apply_snapshot(cluster, sim.partitions(), sim.nodes(), sim.jobs())
    return cluster, sim
