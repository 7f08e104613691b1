from __future__ import annotations

from datetime import timedelta

import pytest

from clusters.backends import registry
from clusters.backends.simulated import SimulatedCluster
from clusters.models import Cluster
from clusters.sync import apply_snapshot
from portal.accounts import create_user_with_role
from portal.roles import Role

PASSWORD = "correct-horse-battery"


@pytest.fixture
def researcher(db):
    return create_user_with_role("alice", Role.RESEARCHER, PASSWORD)[0]


@pytest.fixture
def other_researcher(db):
    return create_user_with_role("bob", Role.RESEARCHER, PASSWORD)[0]


@pytest.fixture
def admin_user(db):
    return create_user_with_role("admin", Role.ADMIN, PASSWORD)[0]


@pytest.fixture
def manager(db):
    return create_user_with_role("manager", Role.MANAGER, PASSWORD)[0]


@pytest.fixture
def sim():
    """A small simulated cluster with no random faults, installed as the backend."""
    simulator = SimulatedCluster.standard(train=4, infer=1, spare=2, seed=7)
    simulator.fault_rate_per_gpu_day = 0
    registry.use(simulator)
    yield simulator
    registry.use(None)


@pytest.fixture
def cluster(db):
    return Cluster.objects.create(name="test", backend="simulated")


@pytest.fixture
def synced(sim, cluster):
    """Reconcile the simulator into the database; call again after changes."""

    def sync(advance: timedelta | None = None):
        if advance:
            sim.advance(advance)
        return apply_snapshot(cluster, sim.partitions(), sim.nodes(), sim.jobs())

    sync()
    return sync
