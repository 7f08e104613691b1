"""Runs the simulator against the database: what `manage.py demo` starts.

Each step advances simulated time, keeps the workload topped up, records the
GPU faults the simulator produced and reconciles the snapshot through the same
`apply_snapshot` that the Slurm sync uses, so the board cannot tell the two
apart.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import close_old_connections, transaction
from django.utils import timezone

from clusters.backends.simulated import SimFault, SimulatedCluster
from clusters.models import Cluster, Gpu, GpuHealth
from clusters.sync import apply_snapshot
from portal import live

logger = logging.getLogger(__name__)


def record_gpu_fault(cluster: Cluster, fault: SimFault) -> None:
    """Turn a simulated XID into GPU health, the way an agent report would."""
    from health.xid import lookup

    info = lookup(fault.xid)
    health = GpuHealth.FAILED if info.severity == "critical" else GpuHealth.DEGRADED
    reason = f"XID {fault.xid}: {info.name}"
    with transaction.atomic():
        gpus = Gpu.objects.filter(
            node__cluster=cluster, node__name=fault.node, index=fault.gpu
        ).select_related("node")
        gpu = gpus.first()
        if gpu is None:
            return
        Gpu.objects.filter(pk=gpu.pk).update(
            health=health, health_reason=reason[:255], health_changed_at=timezone.now()
        )
        node_id = gpu.node_id
        transaction.on_commit(lambda: live.publish_nodes([node_id]))


@dataclass
class DemoOperator:
    """Stands in for a human operator until the remediation engine acts.

    It drains a node after a critical fault and, once the node is idle, reboots
    it, which heals its GPUs in the simulator.
    """

    sim: SimulatedCluster
    repair_after: timedelta = timedelta(hours=2)
    _draining: dict[str, object] = field(default_factory=dict)

    def on_fault(self, fault: SimFault) -> None:
        from health.xid import lookup

        if lookup(fault.xid).severity != "critical" or fault.node in self._draining:
            return
        reason = f"medbay demo: XID {fault.xid} GPU {fault.gpu}"
        self.sim.drain_node(fault.node, reason)
        self._draining[fault.node] = fault.at

    def step(self) -> None:
        for name, since in list(self._draining.items()):
            if self.sim.now - since < self.repair_after:
                continue
            self.sim.reboot_node(name, "medbay demo: reboot after fault")
            del self._draining[name]


class SimulationLoop:
    """Drives a simulator and mirrors it into the database on a thread."""

    def __init__(self, sim: SimulatedCluster, cluster: Cluster, *, interval_s: float = 1.0):
        self.sim = sim
        self.cluster = cluster
        self.interval_s = interval_s
        self.operator = DemoOperator(sim)
        self._faults: list[SimFault] = []
        self._stop = threading.Event()
        sim.fault_listeners.append(self._faults.append)
        sim.fault_listeners.append(self.operator.on_fault)

    def step(self, delta: timedelta | None = None) -> None:
        if delta is None:
            self.sim.tick()
        else:
            self.sim.advance(delta)
        self.sim.generate_workload()
        self.operator.step()
        faults, self._faults[:] = list(self._faults), []
        self.sync()
        for fault in faults:
            record_gpu_fault(self.cluster, fault)

    def sync(self) -> None:
        apply_snapshot(
            self.cluster,
            self.sim.partitions(),
            self.sim.nodes(),
            self.sim.jobs(),
            actor="simulator",
        )

    def run_forever(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.step()
            except Exception:
                logger.exception("Simulation step failed; continuing")
            finally:
                close_old_connections()

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run_forever, name="simulator", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()
