"""Runs the simulator against the database: what `manage.py demo` starts.

Each step advances simulated time, keeps the workload topped up, reconciles
the snapshot through the same `apply_snapshot` that the Slurm sync uses and
reports the GPU faults the simulator produced through the health ingest, as a
node agent would, so neither the board nor the event feed can tell the two
apart.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.db import close_old_connections, transaction
from django.utils import timezone

from clusters import holders
from clusters.backends.base import JobInfo, NodeInfo
from clusters.backends.capabilities import ReadsExpectedStarts, ReportsInferenceLoad
from clusters.backends.simulated import SimFault, SimulatedCluster
from clusters.live import publish_nodes
from clusters.models import Cluster, Gpu, GpuHealth, Node
from sync.cycle import apply_snapshot

if TYPE_CHECKING:
    from health.ingest import IngestResult

logger = logging.getLogger(__name__)


def record_gpu_fault(cluster: Cluster, fault: SimFault) -> IngestResult | None:
    """Report a simulated XID through the agent's parser and the real ingest path.

    The fault becomes the kernel-log line a node would print, parsed by the agent's
    own code, so the event feed, incidents and GPU health cannot tell it from a real
    report. Validation runs against simulated time: the simulator's clock is not ours.
    """
    from agent.events import XidEventBuilder
    from agent.parsers.kmsg import KmsgParser
    from health.ingest import BatchInvalid, ingest, validate_batch

    node = Node.objects.filter(cluster=cluster, name=fault.node).first()
    if node is None:
        return None
    pci = (
        Gpu.objects.filter(node=node, index=fault.gpu).values_list("pci_bus_id", flat=True).first()
    )
    line = kernel_log_line(fault, pci or "")
    events = XidEventBuilder(fault.node).build(KmsgParser().feed(line))
    for event in events:
        # Without a known bus id the line cannot name the GPU; the simulator can.
        event["gpu_index"] = fault.gpu
    try:
        batch = validate_batch({"node": fault.node, "events": events}, now=fault.at)
    except BatchInvalid:
        logger.warning("Simulated fault %s was not a valid event; dropped", fault, exc_info=True)
        return None
    return ingest(node, batch.events)


def kernel_log_line(fault: SimFault, pci: str) -> str:
    """The `journalctl -k -o short-iso` line an NVIDIA driver would print for this fault."""
    # A GPU without a known bus id still needs a syntactically valid address in the line.
    address = pci or f"0000:{fault.gpu:02x}:00"
    stamp = fault.at.isoformat(timespec="microseconds")
    return (
        f"{stamp} {fault.node} kernel: NVRM: Xid (PCI:{address}): {fault.xid}, "
        f"pid='<unknown>', name=<unknown>, {fault.message}"
    )


@dataclass
class RepairShop:
    """Simulated hardware repair: nodes the engine took out of service come back as spares.

    In a real fleet a failed node goes to the vendor (RMA) and returns days later;
    the demo compresses that so the spare pool does not run dry.
    """

    sim: SimulatedCluster
    cluster: Cluster
    repair_after: timedelta = timedelta(hours=6)
    _broken_since: dict[str, object] = field(default_factory=dict)

    def step(self) -> None:
        # Medbay also sends to repair a spare with a fault of its own and a replacement
        # that failed validation; without them the demo's spare pool would only shrink.
        in_repair = set(
            Node.objects.filter(cluster=self.cluster, in_repair_since__isnull=False).values_list(
                "name", flat=True
            )
        )
        for info in self.sim.nodes():
            replaced = "fail" in info.flags and info.reason.startswith("medbay: Action:Replace")
            sent = info.name in in_repair and holders.out_of_service(info)
            if replaced or (sent and holders.is_medbays(info.reason)):
                self._broken_since.setdefault(info.name, self.sim.now)
        for name, since in list(self._broken_since.items()):
            if self.sim.now - since >= self.repair_after:
                self._return_as_spare(name)
                del self._broken_since[name]

    def _return_as_spare(self, name: str) -> None:
        self.sim.move_to_pool(name, "spare")
        self.sim.resume_node(name)
        for index in self.sim.gpu_health(name):
            self.sim.repair_gpu(name, index)
        node = Node.objects.filter(cluster=self.cluster, name=name).first()
        if node is None:
            return
        with transaction.atomic():
            Gpu.objects.filter(node=node).update(
                health=GpuHealth.HEALTHY,
                health_reason="repaired (simulated RMA)",
                health_changed_at=timezone.now(),
            )
            # Back from repair: a spare Medbay may offer again (remediation/spares.py).
            Node.objects.filter(pk=node.pk).update(in_repair_since=None, repair_note="")
            transaction.on_commit(lambda: publish_nodes([node.pk]))


class WallClockDemand(ReadsExpectedStarts, ReportsInferenceLoad):
    """The simulator's demand figures for the demand sampler, on the wall clock: Slurm's
    expected starts are simulated moments, which the portal records as the wall-clock
    moments they stand for (as it does the jobs' own times)."""

    def __init__(self, loop: SimulationLoop) -> None:
        self.loop = loop

    def expected_starts(self) -> dict[int, datetime]:
        starts = self.loop.sim.expected_starts()
        return {job_id: self.loop.wall_time(at) for job_id, at in starts.items()}

    def inference_load(self) -> tuple[float, str]:
        return self.loop.sim.inference_load()


class SimulationLoop:
    """Drives a simulator and mirrors it into the database on a thread."""

    def __init__(self, sim: SimulatedCluster, cluster: Cluster, *, interval_s: float = 1.0):
        self.sim = sim
        self.cluster = cluster
        self.interval_s = interval_s
        # Simulated time runs time_scale times faster than ours. History rows,
        # events and runs are written in wall-clock time, so the jobs' own times
        # are too: one clock on every page.
        self._wall_anchor, self._sim_anchor = timezone.now(), sim.now
        self.repair_shop = RepairShop(sim, cluster)
        self._faults: list[SimFault] = []
        self._stop = threading.Event()
        sim.fault_listeners.append(self._faults.append)

    def step(self, delta: timedelta | None = None) -> None:
        if delta is None:
            self.sim.tick()
        else:
            self.sim.advance(delta)
        self.sim.generate_workload()
        self.repair_shop.step()
        faults, self._faults[:] = list(self._faults), []
        self.sync()
        self.sample_demand()
        for fault in faults:
            # Simulated time runs faster than the wall clock; events carry the
            # time they are reported, as an agent's would.
            record_gpu_fault(self.cluster, replace(fault, at=timezone.now()))

    def warm_up(self, delta: timedelta) -> None:
        """Run the simulator through DELTA that happened before the portal watched.

        Without moving the anchor the simulator's clock would stay DELTA / time_scale
        ahead of ours for good: a job started just now would read as starting in the
        future (negative GPU-hours, "Started" after the timeline's RUNNING row)."""
        self._sim_anchor += delta
        self.step(delta)

    def sync(self) -> None:
        apply_snapshot(
            self.cluster,
            self.sim.partitions(),
            [self._node_on_wall_clock(node) for node in self.sim.nodes()],
            [self._on_wall_clock(job) for job in self.sim.jobs()],
            actor="simulator",
        )

    def sample_demand(self) -> None:
        """The demand signals and the reallocation policies' decisions, as the Slurm
        sync does them after each snapshot (demand/periodic.py), at most every
        MEDBAY_DEMAND_SAMPLE_S."""
        from demand.periodic import tick

        try:
            tick(self.cluster, WallClockDemand(self), self.sim)
        except Exception:  # the demo goes on without this pass's demand
            logger.exception("Demand sampling of the simulated cluster failed")

    def wall_time(self, at: datetime | None) -> datetime | None:
        """A simulated moment as the wall-clock moment it stands for."""
        if at is None:
            return None
        return self._wall_anchor + (at - self._sim_anchor) / self.sim.time_scale

    def _on_wall_clock(self, job: JobInfo) -> JobInfo:
        return replace(
            job,
            submit_time=self.wall_time(job.submit_time),
            start_time=self.wall_time(job.start_time),
            end_time=self.wall_time(job.end_time),
            eligible_time=self.wall_time(job.eligible_time),
        )

    def _node_on_wall_clock(self, node: NodeInfo) -> NodeInfo:
        # "Reason set by root at ..." is a wall-clock field like any other.
        return replace(node, reason_set_at=self.wall_time(node.reason_set_at))

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
