from datetime import timedelta

from clusters.models import Gpu, GpuHealth, Node, NodeStatus
from demo.simulation import SimulationLoop


def test_a_replaced_node_comes_back_as_a_healthy_spare_after_repair(sim, cluster, synced):
    loop = SimulationLoop(sim, cluster)
    loop.sync()
    sim.inject_xid("gpu-02", 3, 79)
    replacement = sim.replace("gpu-02", "medbay: Action:Replace [run 1]")
    loop.step(timedelta(minutes=1))
    assert Node.objects.get(name="gpu-02").status == NodeStatus.FAIL
    assert Node.objects.get(name=replacement).partition_names == "train"
    loop.step(timedelta(hours=7))
    node = Node.objects.get(name="gpu-02")
    assert node.status == NodeStatus.SPARE
    assert node.pool.kind == "spare"
    assert set(Gpu.objects.filter(node=node).values_list("health", flat=True)) == {
        GpuHealth.HEALTHY
    }


def test_simulated_faults_are_reported_at_wall_clock_time(sim, cluster, synced):
    from django.utils import timezone

    from health.models import HealthEvent

    loop = SimulationLoop(sim, cluster)
    sim.advance(timedelta(days=30))  # simulated time runs ahead of the wall clock
    sim.inject_xid("gpu-01", 0, 79)
    loop.step(timedelta(seconds=1))
    event = HealthEvent.objects.get()
    assert abs(event.observed_at - timezone.now()) < timedelta(minutes=1)
