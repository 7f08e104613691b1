"""Fixtures for the chaos suite: private services and a real portal wired to them."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from clusters.backends import registry
from clusters.backends.simulated import SimulatedCluster
from sync.cycle import apply_snapshot
from tests.chaos.services import PrivatePostgres, PrivateRedis
from tests.health.live_portal import PortalServer
from tests.remediation.test_crash_recovery import crash_env  # noqa: F401 - a fixture, reused


@dataclass
class ChaosPortal(PortalServer):
    """The real portal (daphne) with extra environment, e.g. a private Redis."""

    extra_env: dict[str, str] = field(default_factory=dict)

    def environment(self) -> dict[str, str]:
        return {**super().environment(), **self.extra_env}


@pytest.fixture
def private_redis(tmp_path):
    redis = PrivateRedis(tmp_path)
    redis.start()
    try:
        yield redis
    finally:
        redis.stop()


@pytest.fixture
def private_postgres():
    # Not tmp_path: the server runs as the postgres user, who cannot enter
    # pytest's root-owned temporary folders.
    folder = Path(tempfile.mkdtemp(prefix="medbay-chaos-pg-", dir="/tmp"))
    postgres = PrivatePostgres(folder)
    try:
        postgres.init()
        postgres.start()
        yield postgres
    finally:
        if postgres.answers():
            postgres.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def storm_sim(cluster):
    """20 training, 2 inference and 2 spare nodes, so the storm outnumbers every limit."""
    simulator = SimulatedCluster.standard(train=20, infer=2, spare=2, seed=11)
    simulator.fault_rate_per_gpu_day = 0
    registry.use(simulator)
    apply_snapshot(cluster, simulator.partitions(), simulator.nodes(), simulator.jobs())
    yield simulator
    registry.use(None)
