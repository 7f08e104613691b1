"""Simulated GPU faults travel the same ingest path as a real node agent's reports."""

from datetime import timedelta

from clusters.models import Gpu, GpuHealth
from demo.simulation import SimulationLoop, kernel_log_line, record_gpu_fault
from health.models import HealthEvent, Incident
from tests.conftest import PASSWORD


def test_a_simulated_xid_shows_in_the_feed_and_turns_its_gpu_red(
    client, researcher, sim, cluster, synced
):
    loop = SimulationLoop(sim, cluster)
    sim.inject_xid("gpu-03", 3, 79)
    loop.step(timedelta(seconds=1))
    assert client.login(username=researcher.username, password=PASSWORD)

    events = client.get("/api/v1/health/events/", {"node": "gpu-03"}).json()["results"]
    assert [(e["xid"], e["gpu_index"], e["pci"], e["severity"]) for e in events] == [
        (79, 3, "0000:5d:00", "critical")
    ]
    assert "fallen off the bus" in events[0]["message"]
    node = client.get("/api/v1/nodes/gpu-03/").json()
    assert node["gpus"][3]["health"] == "failed"
    assert node["gpus"][3]["health_reason"].startswith("XID 79")
    assert Incident.objects.get(node__name="gpu-03").xids == [79]


def test_a_simulated_fault_reported_twice_is_stored_once(sim, cluster, synced):
    fault = sim.inject_xid("gpu-01", 5, 48)
    first = record_gpu_fault(cluster, fault)
    second = record_gpu_fault(cluster, fault)
    assert (first.accepted, second.accepted, second.duplicates) == (1, 0, 1)
    assert HealthEvent.objects.get().count == 1
    gpu = Gpu.objects.get(node__name="gpu-01", index=5)
    assert gpu.health == GpuHealth.FAILED  # XID 48 (double-bit ECC) is critical


def test_a_warning_xid_degrades_the_gpu_without_failing_it(sim, cluster, synced):
    record_gpu_fault(cluster, sim.inject_xid("gpu-02", 1, 13))
    gpu = Gpu.objects.get(node__name="gpu-02", index=1)
    assert gpu.health == GpuHealth.DEGRADED
    assert gpu.health_reason == "XID 13: Graphics Engine Exception"
    assert HealthEvent.objects.get().severity == "warning"


def test_the_simulated_kernel_line_names_the_gpus_bus_id(sim):
    fault = sim.inject_xid("gpu-01", 3, 79)
    line = kernel_log_line(fault, "0000:5d:00")
    assert "NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>," in line
    assert line.startswith(fault.at.isoformat(timespec="microseconds"))
