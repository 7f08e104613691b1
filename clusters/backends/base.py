"""The seam between Medbay and whatever runs the cluster.

Backends speak plain dataclasses, never Django models, so that the Slurm CLI,
the simulator and a future slurmrestd or pyslurm transport are interchangeable
and testable without a database.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable

from clusters.backends.capabilities import ReadsNodesByName


class BackendError(Exception):
    """A cluster or fleet operation failed.

    `permanent=False` means retrying may help (controller unreachable, timeout);
    `permanent=True` means it will not (unknown node, job not requeueable).
    """

    def __init__(self, message: str, *, permanent: bool) -> None:
        super().__init__(message)
        self.message = message
        self.permanent = permanent


# Slurm node base states, lower-case as Slurm 22.05 JSON prints them.
NODE_BASE_STATES = ("idle", "allocated", "mixed", "down", "future", "unknown")

# Node flags Medbay cares about, lower-case (Slurm prints them upper-case).
NODE_FLAGS = (
    "drain",
    "fail",
    "completing",
    "not_responding",
    "maint",
    "reboot_requested",
    "reboot_issued",
    "reserved",
    "powered_down",
    "invalid",
    "planned",
    "cloud",
)

# Job states as Slurm prints them.
JOB_ACTIVE_STATES = frozenset(
    {"PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "REQUEUED", "RESIZING"}
)


@dataclass(frozen=True)
class NodeInfo:
    """One node as the backend sees it right now."""

    name: str
    state: str  # one of NODE_BASE_STATES
    flags: frozenset[str] = frozenset()
    reason: str = ""
    partitions: tuple[str, ...] = ()
    cpus: int = 0
    memory_mb: int = 0
    gpus: int = 0  # GRES gpu count configured on the node
    gpu_model: str = ""
    gpus_used: int = 0
    reason_set_at: datetime | None = None
    reason_set_by: str = ""  # Slurm's reason_set_by_user: who drained it (root for Medbay too)


@dataclass(frozen=True)
class PartitionInfo:
    """One partition with the limits a job form must respect."""

    name: str
    nodes: tuple[str, ...] = ()
    max_time_minutes: int | None = None  # None: unlimited
    max_nodes: int | None = None  # None: unlimited
    default: bool = False
    state: str = "up"
    total_gpus: int = 0


@dataclass(frozen=True)
class JobInfo:
    """One job as the backend sees it right now."""

    job_id: int
    name: str = ""
    user: str = ""
    account: str = ""
    partition: str = ""
    state: str = "PENDING"  # Slurm's upper-case job state
    reason: str = ""
    nodes: tuple[str, ...] = ()
    node_count: int = 0
    gpus: int = 0  # total GPUs across the allocation (or requested, when pending)
    submit_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    eligible_time: datetime | None = None
    restart_count: int = 0
    requeue: bool = True
    batch_host: str = ""
    exit_code: int | None = None
    time_limit_minutes: int | None = None


@dataclass(frozen=True)
class AccountingRecord:
    """One finished job attempt as Slurm's accounting (slurmdbd) recorded it.

    A requeued job has one record per attempt: the earlier ones end in state
    REQUEUED, each with its own submit time, which is why (cluster, job id,
    submit time) and not the job id alone names a record.
    """

    cluster: str
    job_id: int
    submit_time: datetime
    name: str = ""
    user: str = ""
    account: str = ""
    partition: str = ""
    qos: str = ""
    state: str = "COMPLETED"  # Slurm's upper-case state of this attempt
    start_time: datetime | None = None  # None: it never ran (cancelled while pending)
    end_time: datetime | None = None
    elapsed_s: int = 0
    gpus: int = 0  # allocated gres/gpu (TRES), 0 when it never ran
    nodes: tuple[str, ...] = ()
    exit_code: int | None = None  # None where Slurm's accounting does not say it
    restart_count: int | None = None  # None where this Slurm does not record it


@dataclass(frozen=True)
class JobOutputPaths:
    """Where a job's batch script writes its output and errors (absolute, expanded)."""

    stdout: str
    stderr: str
    user: str = ""  # the job's Unix user as the backend reports it


@dataclass(frozen=True)
class FileTail:
    """The last bytes of a file, decoded for display."""

    path: str
    text: str
    truncated: bool = False  # the file is longer than what was read


class JobFileError(BackendError):
    """A job's output file could not be read; `kind` names why, the message says it in words."""

    MISSING = "missing"
    DENIED = "denied"
    NO_USER = "no_user"
    REFUSED = "refused"
    DISCARDED = "discarded"
    FAILED = "failed"

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message, permanent=kind != self.FAILED)
        self.kind = kind


@dataclass(frozen=True)
class JobSubmission:
    """A batch script to run as a given Unix user."""

    script: str
    user: str
    workdir: str = ""
    extra_env: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class ClusterBackend(Protocol):
    """Reads and acts on the workload manager (Slurm or the simulator)."""

    name: str

    def nodes(self) -> list[NodeInfo]: ...
    def partitions(self) -> list[PartitionInfo]: ...
    def jobs(self) -> list[JobInfo]: ...
    # Slurm's PrivateData kinds (`jobs`, `usage`, ...): what ordinary users may not see.
    def private_data(self) -> frozenset[str]: ...

    def drain_node(self, node: str, reason: str) -> None: ...
    def resume_node(self, node: str) -> None: ...
    def fail_node(self, node: str, reason: str) -> None: ...
    def down_node(self, node: str, reason: str) -> None: ...
    def reboot_node(self, node: str, reason: str) -> None: ...
    def set_partition_nodes(self, partition: str, nodes: Sequence[str]) -> None: ...

    def signal_job(self, job_id: int, signal: str = "USR1", *, batch_only: bool = True) -> None: ...
    def requeue_job(self, job_id: int, *, hold: bool = False) -> None: ...
    def cancel_job(self, job_id: int) -> None: ...
    def hold_job(self, job_id: int) -> None: ...
    def release_job(self, job_id: int) -> None: ...
    def start_now(self, job_id: int) -> None: ...
    def submit_job(self, submission: JobSubmission) -> int: ...

    def job_output_paths(self, job_id: int) -> JobOutputPaths: ...
    # Reads as USER, never as the portal's own account; raises JobFileError.
    def read_job_file(self, user: str, path: str, max_bytes: int) -> FileTail: ...

    # Accounting: job attempts that ended in [start, end), from slurmdbd (sacct),
    # including jobs from before Medbay watched the cluster.
    def finished_jobs(self, start: datetime, end: datetime) -> list[AccountingRecord]: ...


@runtime_checkable
class FleetProvider(Protocol):
    """Moves machines in and out of service (spare pool, Kubernetes, a cloud)."""

    name: str

    def cordon(self, node: str, reason: str) -> None: ...
    def uncordon(self, node: str) -> None: ...
    def evict(self, node: str, *, timeout_s: float = 300) -> None: ...
    def move_to_pool(self, node: str, pool: str) -> None: ...
    # Brings in the first of SPARES still free (Medbay's healthy spares, best first:
    # remediation/spares.py), or the fleet's own pick when none are given;
    # returns the replacement's name.
    def replace(self, node: str, reason: str, *, spares: Sequence[str] = ()) -> str: ...
    def spare_capacity(self) -> list[str]: ...  # names of the spares the fleet sees free


def nodes_named(backend: ClusterBackend, names: Sequence[str]) -> list[NodeInfo]:
    """The named nodes (unknown ones left out): the backend's own narrow read where it
    has one (`ReadsNodesByName`), else its whole node list, filtered. A remediation step
    reads one or two nodes; on 12,500 nodes the whole list costs more than the step."""
    if isinstance(backend, ReadsNodesByName):
        return list(backend.nodes_named(names))
    wanted = set(names)
    return [info for info in backend.nodes() if info.name in wanted]


def pick_spare(free: Sequence[str], wanted: Sequence[str] = ()) -> str:
    """For a spare-pool fleet's `replace`: the first of WANTED (Medbay's healthy spares,
    best first) that is still among the FREE spares, else the first free spare when
    nothing was asked for."""
    if wanted:
        for name in wanted:
            if name in free:
                return name
        # Taken or drained since Medbay chose them: the step chooses again on retry.
        raise BackendError(
            f"None of the spares {', '.join(wanted)} is free any more", permanent=False
        )
    if not free:
        raise BackendError("No spare capacity: the spare pool is empty", permanent=True)
    return free[0]
