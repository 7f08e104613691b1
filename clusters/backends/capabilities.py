"""What a backend or fleet can do beyond the two protocols of `base.py`.

`ClusterBackend` and `FleetProvider` are what every implementation must do. A
few things only some can: the simulator knows each GPU's health and can repair
one, a Slurm backend reads slurm.conf and slurmctld's restarts, Kubernetes sees
other controllers' holds on a node. Each is a small protocol here, and each
implementation names the ones it has in its class line, so a caller asks
`isinstance(backend, RepairsGpus)` and says plainly what it does otherwise,
instead of probing for a method by name.

A wrapper that forwards calls with `__getattr__` declares nothing: from Python
3.12 `isinstance` looks a protocol's members up on the class, so a wrapper must
define the capability's methods itself to have it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from agent.checks.deep import HOLD_PREFIX

if TYPE_CHECKING:  # base.py imports this module: no arrow back
    from clusters.backends.base import NodeInfo


@runtime_checkable
class ReadsNodesByName(Protocol):
    """Reads a few named nodes without listing the whole cluster (the simulator)."""

    def nodes_named(self, names: Sequence[str]) -> list[NodeInfo]: ...


@runtime_checkable
class ReadsConfiguredPartitions(Protocol):
    """Knows each partition's membership as slurm.conf defines it, which Slurm falls
    back to on a restart or reconfigure (partition drift)."""

    def configured_partitions(self) -> dict[str, tuple[str, ...]]: ...


@runtime_checkable
class ReadsControllerGeneration(Protocol):
    """Tells slurmctld's restarts and reconfigures apart, as text that changes with
    each ("" when it cannot tell this time)."""

    def controller_generation(self) -> str: ...


@runtime_checkable
class RunsSlurmCommands(Protocol):
    """Runs Slurm's own commands (`scontrol`, `sinfo`) against a slurm.conf."""

    slurm_conf: str  # "" for Slurm's default

    def run(self, args: Sequence[str], *, input_text: str | None = None) -> str: ...


@runtime_checkable
class ReportsGpuHealth(Protocol):
    """Knows each GPU's health itself, without a node agent (the simulator)."""

    def gpu_health(self, node: str) -> dict[int, str]: ...  # index -> "healthy", ...


@runtime_checkable
class RepairsGpus(Protocol):
    """Can reset a GPU itself (the simulator); elsewhere an admin does it by hand."""

    def repair_gpu(self, node: str, gpu: int) -> None: ...


@runtime_checkable
class ChecksRunOnThisHost(Protocol):
    """Can say whether every one of its nodes is the host Medbay runs on.

    The node agent's checks look at the machine they run on (nvidia-smi, the disk,
    the force-drain file). Run on the engine's host, they say something about a
    node only when that node *is* this host: the local minicluster
    (deploy/minicluster/up puts every node at 127.0.0.1). On a real fleet they
    would judge the engine's machine and pass a broken node, so there only the
    node's own agent may judge it.
    """

    slurm_conf: str  # passed to the checks, so they ask the same Slurm

    def checks_run_on_this_host(self) -> bool: ...


@runtime_checkable
class ReportsFleetHolders(Protocol):
    """Sees other controllers' holds on a node (Kubernetes taints and cordons)."""

    def holders(self, node: str) -> list[str]: ...


# Medbay's maintenance reservations are named this, then the node: `medbay-check-gpu-03`
# (the node agent looks for the same name, and owns it: it imports no app).
CHECK_HOLD_PREFIX = HOLD_PREFIX


@runtime_checkable
class HoldsNodesForChecks(Protocol):
    """Keeps the scheduler off a node while Medbay checks it, and lets go afterwards:
    Slurm's maintenance reservation on that node alone (HyperPod's deep health checks
    run the same way). Each call is idempotent; `checks_holds` names the nodes Medbay
    holds now, so that a hold left behind by a killed engine can be found and removed."""

    def hold_for_checks(self, node: str) -> None: ...
    def release_checks_hold(self, node: str) -> None: ...
    def checks_holds(self) -> list[str]: ...


@runtime_checkable
class ReadsExpectedStarts(Protocol):
    """Says when the scheduler expects each pending job to start (Slurm's `squeue
    --start`): job id -> that moment, for the jobs it has an estimate for. The demand
    signals read it; a backend without it leaves the expected start out."""

    def expected_starts(self) -> dict[int, datetime]: ...


@runtime_checkable
class ReportsInferenceLoad(Protocol):
    """Knows the inference service's load itself (the simulator's daily curve), where a
    site would ask Prometheus: (value, unit), unit "ms" for a latency or "queue"."""

    def inference_load(self) -> tuple[float, str]: ...


@dataclass(frozen=True)
class InferenceDemand:
    """The inference workload as Kubernetes sees it: pods waiting for a node, and the
    replicas its HorizontalPodAutoscaler wants and has (None: no such autoscaler)."""

    pending_pods: int
    desired_replicas: int | None = None
    current_replicas: int | None = None


@runtime_checkable
class ReportsInferenceDemand(Protocol):
    """Sees the inference workload's own demand where it runs (Kubernetes): how many of
    its pods wait for a node, and how many replicas its autoscaler wants and has."""

    def inference_demand(self, namespace: str, selector: str, hpa: str) -> InferenceDemand: ...
