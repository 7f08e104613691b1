"""Fixtures shared by the Django tests.

Imports of Django code stay inside the fixtures so that the plain-Python suites
(agent, parsers, launcher) can also run with `-p no:django`.
"""

from __future__ import annotations

import contextlib
import os
from datetime import timedelta

import pytest

# The real local Slurm clusters, for every app's tests marked `slurm`.
pytest_plugins = ["tests.plugins.slurm_cluster", "tests.plugins.accounting_cluster"]

PASSWORD = "correct-horse-battery"


def _user(username: str, role_name: str):
    from core.roles import Role
    from identity.accounts import create_user_with_role

    return create_user_with_role(username, Role(role_name), PASSWORD)[0]


@pytest.fixture
def researcher(db):
    return _user("alice", "researcher")


@pytest.fixture
def other_researcher(db):
    return _user("bob", "researcher")


@pytest.fixture
def admin_user(db):
    return _user("admin", "admin")


@pytest.fixture
def manager(db):
    return _user("manager", "manager")


@pytest.fixture
def sim():
    """A small simulated cluster with no random faults, installed as the backend."""
    from clusters.backends import registry
    from clusters.backends.simulated import SimulatedCluster

    simulator = SimulatedCluster.standard(train=4, infer=1, spare=2, seed=7)
    simulator.fault_rate_per_gpu_day = 0
    registry.use(simulator)
    yield simulator
    registry.use(None)


def require_postgres(available: bool) -> None:
    """Skip, saying why, where PostgreSQL is not configured; with CI=true fail instead,
    as integration tests never silently skip there."""
    if available:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail("CI=true but DATABASE_URL is not PostgreSQL")
    pytest.skip("needs PostgreSQL: set DATABASE_URL=postgres://...")


@pytest.fixture
def postgres_only(db):
    """For tests of PostgreSQL's own behaviour (row locks, partitions)."""
    from django.db import connection

    require_postgres(connection.vendor == "postgresql")


@pytest.fixture
def cluster(db):
    from clusters.models import Cluster

    return Cluster.objects.create(name="test", backend="simulated")


@pytest.fixture
def synced(sim, cluster):
    """Reconcile the simulator into the database; call again after changes."""
    from sync.cycle import apply_snapshot

    def sync(advance: timedelta | None = None):
        if advance:
            sim.advance(advance)
        return apply_snapshot(cluster, sim.partitions(), sim.nodes(), sim.jobs())

    sync()
    return sync


@pytest.fixture(autouse=True)
def fresh_cache():
    """Each test starts with an empty cache: kept renderings of live regions are keyed
    by version, and a new test database starts its versions again."""
    try:
        from django.core.cache import cache
    except ImportError:  # the plain-Python suites run without Django
        yield
        return
    with contextlib.suppress(Exception):  # a test that stops the cache's server on purpose
        cache.clear()
    yield
