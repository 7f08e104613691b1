from __future__ import annotations

import pytest

from tests.demand.fake_prometheus import FakePrometheus
from tests.demand.prometheus_server import running_prometheus


@pytest.fixture
def fake_prometheus():
    server = FakePrometheus()
    yield server
    server.stop()


@pytest.fixture
def prometheus(tmp_path):
    """Debian's real Prometheus scraping a serving endpoint: (its URL, the Serving)."""
    with running_prometheus(tmp_path) as found:
        yield found


@pytest.fixture
def demand_sim(cluster):
    """Four training nodes, two inference nodes and a spare, in demand mode from now: the
    inference traffic at its trough (the p95 well under 300 ms), no random faults, the
    simulator's clock on ours, reconciled into the database."""
    from django.utils import timezone

    from clusters.backends import registry
    from clusters.backends.simulated import SimulatedCluster
    from sync.cycle import apply_snapshot

    simulator = SimulatedCluster.standard(train=4, infer=2, spare=1, seed=5, start=timezone.now())
    simulator.fault_rate_per_gpu_day = 0
    simulator.demand_mode()
    registry.use(simulator)
    apply_snapshot(cluster, simulator.partitions(), simulator.nodes(), simulator.jobs())
    yield simulator
    registry.use(None)


@pytest.fixture
def resync(demand_sim, cluster):
    from sync.cycle import apply_snapshot

    def sync(advance=None):
        if advance:
            demand_sim.advance(advance)
        apply_snapshot(cluster, demand_sim.partitions(), demand_sim.nodes(), demand_sim.jobs())

    return sync


@pytest.fixture
def make_policy(cluster, demand_sim, admin_user):
    """A policy for the cluster's training and inference pools, saved by an admin."""
    from clusters.models import NodePool
    from demand.models import ReallocationPolicy
    from demand.policies import save_policy

    def make(**values):
        fields = {
            "enabled": True,
            "mode": "approval",
            "hysteresis_s": 0,
            "training_max_wait_s": 300,
            "cooldown_s": 3600,
            **values,
        }
        policy = ReallocationPolicy(
            cluster=cluster,
            training_pool=NodePool.objects.get(cluster=cluster, kind="training"),
            inference_pool=NodePool.objects.get(cluster=cluster, kind="inference"),
            **fields,
        )
        return save_policy(policy, user=admin_user)

    return make
