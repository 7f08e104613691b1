"""A deterministic, in-memory cluster that behaves like Slurm.

It implements both `ClusterBackend` and `FleetProvider`, so the portal, the
sync loop and the remediation engine run unchanged on a laptop. Semantics follow
what was observed on real Slurm (SLURM-MINICLUSTER.md): drain lets jobs finish,
down kills them and requeues the requeueable ones, a requeued job waits
`cred_expire + 1 s` before it is eligible again, GRES GPUs are counted per node.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from clusters.backends.base import (
    AccountingRecord,
    BackendError,
    FileTail,
    JobFileError,
    JobInfo,
    JobOutputPaths,
    JobSubmission,
    NodeInfo,
    PartitionInfo,
    pick_spare,
)
from clusters.backends.capabilities import (
    ReadsExpectedStarts,
    ReadsNodesByName,
    RepairsGpus,
    ReportsGpuHealth,
    ReportsInferenceLoad,
)
from clusters.backends.job_files import expand_output_pattern
from clusters.backends.slurm_syntax import duration_minutes

# Llama 3 405B pre-training: 419 unexpected interruptions in 54 days on 16,384
# GPUs, about 58% of them GPU-related (Meta, "The Llama 3 Herd of Models").
LLAMA3_INTERRUPTIONS_PER_GPU_DAY = 419 / (54 * 16384)
LLAMA3_GPU_RELATED_SHARE = 0.58

# Which XIDs a random GPU fault produces, roughly as field reports rank them.
DEFAULT_XID_MIX: tuple[tuple[int, float], ...] = (
    (79, 0.22),
    (48, 0.14),
    (94, 0.10),
    (95, 0.06),
    (74, 0.12),
    (119, 0.10),
    (13, 0.10),
    (31, 0.08),
    (64, 0.04),
    (140, 0.04),
)

# Slurm holds a requeued job until cred_expire + 1 s (default cred_expire=120).
DEFAULT_REQUEUE_HOLD = timedelta(seconds=121)

TERMINAL_JOB_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED"}
)


@dataclass
class SimNode:
    name: str
    partitions: list[str]
    gpus: int = 8
    cpus: int = 64
    memory_mb: int = 512_000
    gpu_model: str = "h100"
    down: bool = False
    flags: set[str] = field(default_factory=set)
    reason: str = ""
    reason_set_by: str = ""
    reason_set_at: datetime | None = None
    cordoned: bool = False
    pool: str = "training"
    gpu_health: dict[int, str] = field(default_factory=dict)


@dataclass
class SimJob:
    job_id: int
    name: str
    user: str
    account: str
    partition: str
    nodes_wanted: int
    gpus_per_node: int
    duration: timedelta
    submit_time: datetime
    state: str = "PENDING"
    reason: str = "Priority"
    nodes: list[str] = field(default_factory=list)
    start_time: datetime | None = None
    end_time: datetime | None = None
    eligible_time: datetime | None = None
    restart_count: int = 0
    requeue: bool = True
    held: bool = False
    signals: list[tuple[datetime, str]] = field(default_factory=list)
    script: str = ""
    time_limit_minutes: int | None = None
    exit_code: int | None = None


@dataclass(frozen=True)
class SimFault:
    """A fault the simulator produced, as a node agent would report it."""

    node: str
    gpu: int
    xid: int
    at: datetime
    message: str


XID_MESSAGES = {
    13: "Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): Out Of Range Address",
    31: "Ch 0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS faulted",
    43: "Ch 00000008",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU",
    64: "Dynamic Page Retirement: Fatal error, unable to retire page",
    74: "NVLink: fatal error detected on link 4(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)",
    79: "GPU has fallen off the bus.",
    94: "Contained: CE User Channel (0x9). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP!",
    140: "An uncorrectable ECC error escaped page offlining",
}

CRITICAL_XIDS = frozenset({48, 64, 74, 79, 95, 119, 120, 140})


@dataclass(frozen=True)
class InferenceCurve:
    """A day of inference traffic for the demand demo and tests: at its trough when the
    simulator starts, PEAK_RATIO times that twelve hours later, and back.

    Traffic is counted in nodes' worth: TROUGH_NODES is what the trough needs at full
    use. The p95 latency of the inference pool rises as a queue's does with its use:
    BASE_MS / (1 - use), so 100 ms idle, 300 ms at two thirds, capped at MAX_MS.
    """

    trough_nodes: float = 1.2
    peak_ratio: float = 3.0
    base_ms: float = 100.0
    max_ms: float = 5000.0

    def demand_nodes(self, since_start: timedelta) -> float:
        phase = 2 * math.pi * since_start.total_seconds() / 86400
        return self.trough_nodes * (1 + (self.peak_ratio - 1) * (1 - math.cos(phase)) / 2)

    def latency_ms(self, since_start: timedelta, serving_nodes: int) -> float:
        if serving_nodes <= 0:
            return self.max_ms
        use = self.demand_nodes(since_start) / serving_nodes
        return min(self.max_ms, self.base_ms / max(1 - use, self.base_ms / self.max_ms))


class SimulatedCluster(
    ReadsNodesByName, ReportsGpuHealth, RepairsGpus, ReadsExpectedStarts, ReportsInferenceLoad
):
    """Both backend protocols over one in-memory cluster; it also reads nodes by name,
    knows each GPU's health and repairs GPUs itself, which Slurm cannot, estimates when
    pending jobs start, and serves a daily inference load curve (`demand_mode`)."""

    name = "simulated"

    def __init__(
        self,
        *,
        seed: int = 42,
        time_scale: float = 1.0,
        start: datetime | None = None,
        requeue_hold: timedelta = DEFAULT_REQUEUE_HOLD,
        fault_rate_per_gpu_day: float = LLAMA3_INTERRUPTIONS_PER_GPU_DAY * LLAMA3_GPU_RELATED_SHARE,
        xid_mix: Sequence[tuple[int, float]] = DEFAULT_XID_MIX,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rng = random.Random(seed)
        self.time_scale = time_scale
        self.now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self.acting_user = "root"
        self.requeue_hold = requeue_hold
        self.fault_rate_per_gpu_day = fault_rate_per_gpu_day
        self.xid_mix = tuple(xid_mix)
        self._clock = clock
        self._last_tick = clock()
        self._lock = threading.RLock()
        self._nodes: dict[str, SimNode] = {}
        self._partitions: dict[str, PartitionInfo] = {}
        self._jobs: dict[int, SimJob] = {}
        self._next_job_id = 1000
        self.faults: list[SimFault] = []
        # Slurm's PrivateData: none by default, as a fresh slurm.conf; tests set {"jobs"}.
        self.private_data_kinds: frozenset[str] = frozenset()
        self.fault_listeners: list[Callable[[SimFault], None]] = []
        # Demand mode (`demand_mode`): inference traffic follows this curve, served outside
        # Slurm's jobs, and training work arrives in bursts.
        self.inference_curve: InferenceCurve | None = None
        self._started = self.now
        self._next_burst: datetime | None = None

    # ----------------------------------------------------------- building
    def add_partition(
        self,
        name: str,
        *,
        max_time_minutes: int | None = 7 * 24 * 60,
        max_nodes: int | None = None,
        default: bool = False,
    ) -> None:
        self._partitions[name] = PartitionInfo(
            name=name, max_time_minutes=max_time_minutes, max_nodes=max_nodes, default=default
        )

    def add_node(self, name: str, partition: str, *, pool: str = "training", gpus: int = 8) -> None:
        node = SimNode(name=name, partitions=[partition], gpus=gpus, pool=pool)
        node.gpu_health = {index: "healthy" for index in range(gpus)}
        self._nodes[name] = node

    @classmethod
    def standard(
        cls, *, train: int = 24, infer: int = 4, spare: int = 4, prefix: str = "gpu", **kwargs
    ) -> SimulatedCluster:
        """The demo layout: partitions train, infer and spare of 8-GPU nodes."""
        sim = cls(**kwargs)
        sim.add_partition("train", default=True)
        sim.add_partition("infer")
        sim.add_partition("spare")
        width = max(2, len(str(train + infer + spare)))
        number = 0
        for partition, count, pool in (
            ("train", train, "training"),
            ("infer", infer, "inference"),
            ("spare", spare, "spare"),
        ):
            for _ in range(count):
                number += 1
                sim.add_node(f"{prefix}-{number:0{width}d}", partition, pool=pool)
        return sim

    @classmethod
    def sized(cls, nodes: int, *, prefix: str = "gpu", **kwargs) -> SimulatedCluster:
        """The demo's proportions for `nodes` nodes: an eighth infer, an eighth spare."""
        infer = spare = max(1, nodes // 8)
        return cls.standard(
            train=max(1, nodes - infer - spare), infer=infer, spare=spare, prefix=prefix, **kwargs
        )

    # ----------------------------------------------------------- reading
    def nodes(self) -> list[NodeInfo]:
        with self._lock:
            used = self._gpus_used_by_node()
            return [self._node_info(node, used) for node in self._nodes.values()]

    def nodes_named(self, names: Sequence[str]) -> list[NodeInfo]:
        """The named nodes only (unknown names are left out): a step reading one node of
        12,500 should not pay for all of them."""
        with self._lock:
            wanted = [self._nodes[name] for name in dict.fromkeys(names) if name in self._nodes]
            used = self._gpus_used_by_node() if wanted else {}
            return [self._node_info(node, used) for node in wanted]

    def partitions(self) -> list[PartitionInfo]:
        with self._lock:
            members: dict[str, list[str]] = {name: [] for name in self._partitions}
            for node in self._nodes.values():
                for partition in node.partitions:
                    members.setdefault(partition, []).append(node.name)
            return [
                replace(
                    info,
                    nodes=tuple(members.get(name, [])),
                    total_gpus=sum(self._nodes[n].gpus for n in members.get(name, [])),
                )
                for name, info in self._partitions.items()
            ]

    def jobs(self) -> list[JobInfo]:
        with self._lock:
            return [self._job_info(job) for job in self._jobs.values()]

    def private_data(self) -> frozenset[str]:
        return frozenset(self.private_data_kinds)

    def expected_starts(self) -> dict[int, datetime]:
        """When each pending job could start, as Slurm's backfill estimates it: once
        enough of its partition's nodes are free, counting the running jobs' ends (their
        durations stand in for time limits). Held jobs get no estimate, as in Slurm."""
        with self._lock:
            ends: dict[str, datetime] = {}
            for job in self._jobs.values():
                if job.state == "RUNNING" and job.start_time is not None:
                    for name in job.nodes:
                        end = job.start_time + job.duration
                        ends[name] = max(ends.get(name, end), end)
            starts = {}
            for job in self._jobs.values():
                if job.state != "PENDING" or job.held:
                    continue
                members = [
                    node.name
                    for node in self._nodes.values()
                    if job.partition in node.partitions and _schedulable(node)
                ]
                free_at = sorted(ends.get(name, self.now) for name in members)
                if len(free_at) >= max(job.nodes_wanted, 1):
                    start = free_at[max(job.nodes_wanted, 1) - 1]
                    starts[job.job_id] = max(start, job.eligible_time or start, self.now)
            return starts

    def demand_mode(self, curve: InferenceCurve | None = None) -> None:
        """Inference traffic follows CURVE from now (served outside Slurm's jobs, as a
        Kubernetes or vLLM service would be, so the inference nodes read idle in Slurm),
        and training jobs arrive in bursts instead of keeping the queue topped up."""
        with self._lock:
            self.inference_curve = curve or InferenceCurve()
            self._started = self.now
            self._next_burst = self.now

    def inference_load(self) -> tuple[float, str]:
        """The inference pool's p95 latency in ms under the curve's traffic now."""
        with self._lock:
            curve = self.inference_curve or InferenceCurve()
            serving = sum(
                1
                for node in self._nodes.values()
                if node.pool == "inference" and _schedulable(node)
            )
            return curve.latency_ms(self.now - self._started, serving), "latency_ms"

    def finished_jobs(self, start: datetime, end: datetime) -> list[AccountingRecord]:
        """The simulator's own accounting: one record per finished job (it keeps no
        separate record of attempts before a requeue, only the count)."""
        with self._lock:
            return [
                self._accounting_record(job)
                for job in self._jobs.values()
                if job.state in TERMINAL_JOB_STATES
                and job.end_time is not None
                and start <= job.end_time < end
            ]

    def _accounting_record(self, job: SimJob) -> AccountingRecord:
        ran = job.start_time is not None
        elapsed = (job.end_time - job.start_time).total_seconds() if ran else 0
        return AccountingRecord(
            cluster=self.name,
            job_id=job.job_id,
            submit_time=job.submit_time,
            name=job.name,
            user=job.user,
            account=job.account,
            partition=job.partition,
            qos="normal",
            state=job.state,
            start_time=job.start_time,
            end_time=job.end_time,
            elapsed_s=int(elapsed),
            gpus=job.nodes_wanted * job.gpus_per_node if ran else 0,
            nodes=tuple(job.nodes),
            exit_code=job.exit_code,
            restart_count=job.restart_count,
        )

    def job(self, job_id: int) -> SimJob:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise BackendError(f"Invalid job id specified: {job_id}", permanent=True) from None

    def gpu_health(self, node: str) -> dict[int, str]:
        with self._lock:
            return dict(self._node(node).gpu_health)

    def _node(self, name: str) -> SimNode:
        try:
            return self._nodes[name]
        except KeyError:
            raise BackendError(f"Invalid node name specified: {name}", permanent=True) from None

    def _gpus_used_by_node(self) -> dict[str, int]:
        # One pass over the jobs for every node: per node it was nodes x jobs, minutes
        # for 12,500 nodes and 60,000 jobs.
        used: dict[str, int] = {}
        for job in self._jobs.values():
            if job.state in ("RUNNING", "COMPLETING"):
                for name in job.nodes:
                    used[name] = used.get(name, 0) + job.gpus_per_node
        return used

    def _node_info(self, node: SimNode, used_by_node: dict[str, int] | None = None) -> NodeInfo:
        if used_by_node is None:
            used_by_node = self._gpus_used_by_node()
        used = used_by_node.get(node.name, 0)
        if node.down:
            state = "down"
        elif used == 0:
            state = "idle"
        elif used >= node.gpus:
            state = "allocated"
        else:
            state = "mixed"
        return NodeInfo(
            name=node.name,
            state=state,
            flags=frozenset(node.flags),
            reason=node.reason,
            partitions=tuple(node.partitions),
            cpus=node.cpus,
            memory_mb=node.memory_mb,
            gpus=node.gpus,
            gpu_model=node.gpu_model,
            gpus_used=used,
            reason_set_at=node.reason_set_at if node.reason else None,
            reason_set_by=node.reason_set_by if node.reason else "",
        )

    def _job_info(self, job: SimJob) -> JobInfo:
        return JobInfo(
            job_id=job.job_id,
            name=job.name,
            user=job.user,
            account=job.account,
            partition=job.partition,
            state=job.state,
            reason=job.reason if job.state == "PENDING" else "None",
            nodes=tuple(job.nodes),
            node_count=job.nodes_wanted,
            gpus=job.nodes_wanted * job.gpus_per_node,
            submit_time=job.submit_time,
            start_time=job.start_time,
            end_time=job.end_time,
            eligible_time=job.eligible_time,
            restart_count=job.restart_count,
            requeue=job.requeue,
            batch_host=job.nodes[0] if job.nodes else "",
            exit_code=job.exit_code,
            time_limit_minutes=job.time_limit_minutes,
        )

    # ----------------------------------------------------------- node actions
    def drain_node(self, node: str, reason: str) -> None:
        self._set_flag(node, "drain", reason)

    def fail_node(self, node: str, reason: str) -> None:
        self._set_flag(node, "fail", reason)

    def down_node(self, node: str, reason: str) -> None:
        _require_reason(reason)
        with self._lock:
            sim_node = self._node(node)
            sim_node.down = True
            self._stamp(sim_node, reason)
            self._kill_jobs_on(sim_node.name)

    def resume_node(self, node: str) -> None:
        with self._lock:
            sim_node = self._node(node)
            sim_node.down = False
            sim_node.flags -= {"drain", "fail", "reboot_requested"}
            sim_node.reason = ""

    def reboot_node(self, node: str, reason: str) -> None:
        """`scontrol reboot ASAP nextstate=resume`: drain, then reboot once idle."""
        _require_reason(reason)
        with self._lock:
            sim_node = self._node(node)
            sim_node.flags |= {"drain", "reboot_requested"}
            self._stamp(sim_node, reason)

    def set_partition_nodes(self, partition: str, nodes: Sequence[str]) -> None:
        with self._lock:
            if partition not in self._partitions:
                raise BackendError(f"Invalid partition name specified: {partition}", permanent=True)
            wanted = set(nodes)
            for name in wanted:
                self._node(name)
            for sim_node in self._nodes.values():
                if sim_node.name in wanted and partition not in sim_node.partitions:
                    sim_node.partitions.append(partition)
                elif sim_node.name not in wanted and partition in sim_node.partitions:
                    sim_node.partitions.remove(partition)

    def _set_flag(self, node: str, flag: str, reason: str) -> None:
        _require_reason(reason)
        with self._lock:
            sim_node = self._node(node)
            sim_node.flags.add(flag)
            self._stamp(sim_node, reason)

    def _stamp(self, sim_node: SimNode, reason: str) -> None:
        """Slurm records who set a reason and when (everyone acts as root here)."""
        sim_node.reason = reason
        sim_node.reason_set_by = self.acting_user
        sim_node.reason_set_at = self.now

    def _kill_jobs_on(self, node: str) -> None:
        for job in list(self._jobs.values()):
            if job.state == "RUNNING" and node in job.nodes:
                if job.requeue:
                    self._requeue(job, reason="NodeDown")
                else:
                    self._finish(job, "NODE_FAIL", exit_code=1)

    # ----------------------------------------------------------- job actions
    def signal_job(self, job_id: int, signal: str = "USR1", *, batch_only: bool = True) -> None:
        with self._lock:
            job = self.job(job_id)
            if job.state != "RUNNING":
                raise BackendError(f"Job {job_id} is not running", permanent=True)
            job.signals.append((self.now, signal))

    def requeue_job(self, job_id: int, *, hold: bool = False) -> None:
        with self._lock:
            job = self.job(job_id)
            if job.state == "PENDING":
                raise BackendError("Job is pending execution", permanent=True)
            if job.state not in ("RUNNING", "SUSPENDED") and job.state not in TERMINAL_JOB_STATES:
                raise BackendError(f"Job {job_id} cannot be requeued now", permanent=False)
            if not job.requeue:
                raise BackendError(f"Job {job_id} is not requeueable", permanent=True)
            self._requeue(job, reason="BeginTime")
            job.held = hold
            if hold:
                job.reason = "JobHeldAdmin"

    def _requeue(self, job: SimJob, *, reason: str) -> None:
        job.state = "PENDING"
        job.reason = reason
        job.nodes = []
        job.start_time = None
        job.restart_count += 1
        job.submit_time = self.now
        job.eligible_time = self.now + self.requeue_hold

    def cancel_job(self, job_id: int) -> None:
        with self._lock:
            job = self.job(job_id)
            if job.state in TERMINAL_JOB_STATES:
                raise BackendError(f"Job {job_id} has already finished", permanent=True)
            self._finish(job, "CANCELLED", exit_code=0)

    def hold_job(self, job_id: int) -> None:
        with self._lock:
            job = self.job(job_id)
            if job.state != "PENDING":
                raise BackendError("Job is not pending; only pending jobs can be held", True)
            job.held = True
            job.reason = "JobHeldAdmin"

    def release_job(self, job_id: int) -> None:
        with self._lock:
            job = self.job(job_id)
            job.held = False
            if job.state == "PENDING":
                job.reason = "Priority"

    def start_now(self, job_id: int) -> None:
        with self._lock:
            job = self.job(job_id)
            if job.state != "PENDING":
                raise BackendError(f"Job {job_id} is not pending", permanent=True)
            job.eligible_time = self.now

    def submit_job(self, submission: JobSubmission) -> int:
        directives = parse_sbatch_directives(submission.script)
        with self._lock:
            partition = directives.get("partition") or self._default_partition()
            if partition not in self._partitions:
                raise BackendError(f"invalid partition specified: {partition}", permanent=True)
            return self._add_job(
                name=directives.get("job-name", "sbatch"),
                user=submission.user,
                account=directives.get("account", ""),
                partition=partition,
                nodes=int(directives.get("nodes", "1")),
                gpus_per_node=_gpus_from_directives(directives),
                duration=timedelta(minutes=self.rng.randint(30, 600)),
                script=submission.script,
                requeue="no-requeue" not in directives,
                time_limit_minutes=duration_minutes(directives.get("time")),
            )

    def _default_partition(self) -> str:
        for info in self._partitions.values():
            if info.default:
                return info.name
        return next(iter(self._partitions))

    def _add_job(self, **kwargs) -> int:
        job_id = self._next_job_id
        self._next_job_id += 1
        script = kwargs.pop("script", "")
        requeue = kwargs.pop("requeue", True)
        time_limit = kwargs.pop("time_limit_minutes", None)
        self._jobs[job_id] = SimJob(
            job_id=job_id,
            name=kwargs["name"],
            user=kwargs["user"],
            account=kwargs["account"],
            partition=kwargs["partition"],
            nodes_wanted=kwargs["nodes"],
            gpus_per_node=kwargs["gpus_per_node"],
            duration=kwargs["duration"],
            submit_time=self.now,
            eligible_time=self.now,
            script=script,
            requeue=requeue,
            time_limit_minutes=time_limit,
        )
        return job_id

    # ----------------------------------------------------------- job output
    def job_output_paths(self, job_id: int) -> JobOutputPaths:
        """The --output/--error of the job's script, expanded as Slurm would."""
        with self._lock:
            job = self.job(job_id)
            directives = parse_sbatch_directives(job.script)
            fields = {
                "job_id": job.job_id,
                "user": job.user,
                "name": job.name,
                "workdir": directives.get("chdir") or f"/home/{job.user}",
                "node": job.nodes[0] if job.nodes else "",
            }
            stdout = expand_output_pattern(directives.get("output") or "slurm-%j.out", **fields)
            stderr = directives.get("error")
            stderr = expand_output_pattern(stderr, **fields) if stderr else stdout
            return JobOutputPaths(stdout=stdout, stderr=stderr, user=job.user)

    def read_job_file(self, user: str, path: str, max_bytes: int) -> FileTail:
        """A few made-up log lines, so that the demo's job pages show something."""
        if user == "root" or not user:
            raise JobFileError(JobFileError.REFUSED, f"Medbay does not read files as {user!r}.")
        with self._lock:
            job = next(
                (j for j in self._jobs.values() if j.user == user and path in self._paths_of(j)),
                None,
            )
            if job is None or (job.start_time is None and not job.restart_count):
                raise JobFileError(
                    JobFileError.MISSING,
                    f"{path} does not exist (yet): Slurm creates it when the job starts.",
                )
            paths = self.job_output_paths(job.job_id)
            errors_only = path == paths.stderr and paths.stderr != paths.stdout
            text = _fake_log(job, self.now, errors_only=errors_only).encode()
        return FileTail(
            path=path,
            text=text[-max_bytes:].decode(errors="replace"),
            truncated=len(text) > max_bytes,
        )

    def _paths_of(self, job: SimJob) -> tuple[str, str]:
        paths = self.job_output_paths(job.job_id)
        return paths.stdout, paths.stderr

    # ----------------------------------------------------------- fleet
    def cordon(self, node: str, reason: str) -> None:
        with self._lock:
            self._node(node).cordoned = True

    def uncordon(self, node: str) -> None:
        with self._lock:
            self._node(node).cordoned = False

    def evict(self, node: str, *, timeout_s: float = 300) -> None:
        with self._lock:
            self._node(node)
            self._kill_jobs_on(node)

    def move_to_pool(self, node: str, pool: str) -> None:
        partition = {"training": "train", "inference": "infer", "spare": "spare"}.get(pool)
        if partition is None:
            raise BackendError(f"Unknown pool {pool!r}", permanent=True)
        with self._lock:
            sim_node = self._node(node)
            sim_node.pool = pool
            sim_node.partitions = [partition]

    def spare_capacity(self) -> list[str]:
        """Idle spares, as Slurm would see them; Medbay's choice among them is
        remediation.spares."""
        with self._lock:
            used = self._gpus_used_by_node()
            return [
                node.name
                for node in self._nodes.values()
                if node.pool == "spare"
                and not node.down
                and not node.flags & {"drain", "fail"}
                and used.get(node.name, 0) == 0
            ]

    def replace(self, node: str, reason: str, *, spares: Sequence[str] = ()) -> str:
        """Bring the first of SPARES still free (else the first free spare) into the
        failed node's partitions; fail the old node."""
        with self._lock:
            failed = self._node(node)
            free = [name for name in self.spare_capacity() if name != node]
            spare = self._nodes[pick_spare(free, spares)]
            spare.partitions = list(failed.partitions)
            spare.pool = failed.pool
            spare.flags -= {"drain", "fail"}
            spare.reason = ""
            failed.flags.add("fail")
            self._stamp(failed, reason)
            failed.partitions = ["spare"]
            failed.pool = "spare"
            return spare.name

    # ----------------------------------------------------------- faults
    def inject_xid(self, node: str, gpu: int, code: int, message: str = "") -> SimFault:
        with self._lock:
            sim_node = self._node(node)
            if gpu not in sim_node.gpu_health:
                raise BackendError(f"{node} has no GPU {gpu}", permanent=True)
            fault = SimFault(
                node=node,
                gpu=gpu,
                xid=code,
                at=self.now,
                message=message or XID_MESSAGES.get(code, f"Xid {code}"),
            )
            sim_node.gpu_health[gpu] = "failed" if code in CRITICAL_XIDS else "degraded"
            self.faults.append(fault)
        for listener in list(self.fault_listeners):
            listener(fault)
        return fault

    def repair_gpu(self, node: str, gpu: int) -> None:
        with self._lock:
            self._node(node).gpu_health[gpu] = "healthy"

    # ----------------------------------------------------------- time
    def tick(self) -> timedelta:
        """Advance by the wall-clock time since the last tick, times time_scale."""
        now = self._clock()
        elapsed = timedelta(seconds=(now - self._last_tick) * self.time_scale)
        self._last_tick = now
        self.advance(elapsed)
        return elapsed

    def advance(self, delta: timedelta) -> None:
        with self._lock:
            self.now += delta
            self._finish_due_jobs()
            self._maybe_inject_faults(delta)
            self._reboot_idle_nodes()
            self._schedule()

    def _finish_due_jobs(self) -> None:
        for job in self._jobs.values():
            if job.state == "RUNNING" and job.start_time + job.duration <= self.now:
                self._finish(job, "COMPLETED", exit_code=0)

    def _finish(self, job: SimJob, state: str, *, exit_code: int) -> None:
        job.state = state
        job.end_time = self.now
        job.exit_code = exit_code
        job.reason = "None"

    def _reboot_idle_nodes(self) -> None:
        rebooting = [node for node in self._nodes.values() if "reboot_requested" in node.flags]
        used = self._gpus_used_by_node() if rebooting else {}
        for node in rebooting:
            if used.get(node.name, 0) == 0:
                node.flags -= {"reboot_requested", "drain"}
                node.reason = ""
                node.gpu_health = {index: "healthy" for index in node.gpu_health}

    def _maybe_inject_faults(self, delta: timedelta) -> None:
        if self.fault_rate_per_gpu_day <= 0 or not self._nodes:
            return
        gpu_days = sum(n.gpus for n in self._nodes.values()) * delta.total_seconds() / 86400
        expected = gpu_days * self.fault_rate_per_gpu_day
        count = poisson(self.rng, expected)
        names = sorted(self._nodes)
        for _ in range(count):
            node = self._nodes[self.rng.choice(names)]
            gpu = self.rng.randrange(node.gpus)
            code = weighted_choice(self.rng, self.xid_mix)
            self._lock.release()
            try:
                self.inject_xid(node.name, gpu, code)
            finally:
                self._lock.acquire()

    def _schedule(self) -> None:
        """First-fit FIFO scheduling of eligible pending jobs onto free GPUs."""
        used = self._gpus_used_by_node()
        free = {
            node.name: node.gpus - used.get(node.name, 0)
            for node in self._nodes.values()
            if _schedulable(node)
        }
        pending = sorted(
            (j for j in self._jobs.values() if j.state == "PENDING" and not j.held),
            key=lambda j: j.job_id,
        )
        for job in pending:
            if job.eligible_time and job.eligible_time > self.now:
                job.reason = "BeginTime"
                continue
            candidates = [
                name
                for name in sorted(free)
                if job.partition in self._nodes[name].partitions
                and free[name] >= job.gpus_per_node
                and (job.gpus_per_node > 0 or free[name] > 0)
            ]
            if len(candidates) < job.nodes_wanted:
                job.reason = "Resources"
                continue
            chosen = candidates[: job.nodes_wanted]
            for name in chosen:
                free[name] -= max(job.gpus_per_node, 1) if job.gpus_per_node else 0
            job.state = "RUNNING"
            job.reason = "None"
            job.nodes = chosen
            job.start_time = self.now

    # ----------------------------------------------------------- workload
    def generate_workload(self, *, users: Sequence[str] = ("alice", "bob", "carol")) -> None:
        """Keep training busy with multi-node jobs, evals, and inference serving."""
        with self._lock:
            if self.inference_curve is not None:
                self._training_bursts(users)
                return
            pending = sum(1 for j in self._jobs.values() if j.state == "PENDING")
            if pending >= 6:
                return
            for _ in range(6 - pending):
                self._add_random_job(users)

    def _add_random_job(self, users: Sequence[str]) -> None:
        kind = self.rng.random()
        user = self.rng.choice(list(users))
        if kind < 0.45:
            nodes = self.rng.choice((2, 2, 4, 4, 8))
            self._add_job(
                name=f"pretrain-{self.rng.randrange(1000):03d}",
                user=user,
                account="llm",
                partition="train",
                nodes=nodes,
                gpus_per_node=8,
                duration=timedelta(hours=self.rng.uniform(2, 18)),
            )
        elif kind < 0.85:
            self._add_job(
                name=f"eval-{self.rng.randrange(1000):03d}",
                user=user,
                account="eval",
                partition="train",
                nodes=1,
                gpus_per_node=self.rng.choice((1, 2, 4)),
                duration=timedelta(minutes=self.rng.uniform(10, 90)),
            )
        elif "infer" in self._partitions:
            self._add_job(
                name=f"serve-{self.rng.randrange(100):02d}",
                user="inference",
                account="serving",
                partition="infer",
                nodes=1,
                gpus_per_node=self.rng.choice((4, 8)),
                duration=timedelta(hours=self.rng.uniform(6, 48)),
            )

    def _training_bursts(self, users: Sequence[str]) -> None:
        """Demand mode's training queue: every one to four hours a burst of jobs asking
        for 0.8 to 1.6 times the training nodes there are, so that a queue builds."""
        if self._next_burst is None or self.now < self._next_burst:
            return
        training = sum(1 for node in self._nodes.values() if node.pool == "training")
        wanted = max(1, round(training * self.rng.uniform(0.8, 1.6)))
        while wanted > 0:
            nodes = min(wanted, self.rng.choice((1, 1, 2, 2, 4)))
            wanted -= nodes
            self._add_job(
                name=f"train-{self.rng.randrange(1000):03d}",
                user=self.rng.choice(list(users)),
                account="llm",
                partition="train",
                nodes=nodes,
                gpus_per_node=8,
                duration=timedelta(hours=self.rng.uniform(0.5, 4)),
            )
        self._next_burst = self.now + timedelta(hours=self.rng.uniform(1, 4))


def _schedulable(node: SimNode) -> bool:
    return not node.down and not node.cordoned and not node.flags & {"drain", "fail"}


def _require_reason(reason: str) -> None:
    if not reason or not reason.strip():
        raise BackendError("A reason is required to drain, fail or down a node", permanent=True)


def poisson(rng: random.Random, mean: float) -> int:
    """A Poisson-distributed count with this mean, drawn from RNG."""
    # Knuth's method is fine for the small means a tick produces.
    if mean <= 0:
        return 0
    if mean > 30:
        return max(0, round(rng.gauss(mean, mean**0.5)))
    limit = pow(2.718281828459045, -mean)
    count, product = 0, rng.random()
    while product > limit:
        count += 1
        product *= rng.random()
    return count


def weighted_choice(rng: random.Random, weighted: Sequence[tuple[int, float]]) -> int:
    """One value of (value, weight) pairs, drawn from RNG in proportion to its weight."""
    total = sum(weight for _, weight in weighted)
    point = rng.uniform(0, total)
    for value, weight in weighted:
        point -= weight
        if point <= 0:
            return value
    return weighted[-1][0]


def _fake_log(job: SimJob, now: datetime, *, errors_only: bool) -> str:
    """What a training script prints: a banner per attempt, then a loss a minute."""
    if errors_only:
        return "".join(
            f"srun: warning: job {job.job_id} requeued (attempt {attempt + 1})\n"
            for attempt in range(job.restart_count)
        )
    started = job.start_time or job.submit_time
    ran = (job.end_time or now) - started if job.start_time else timedelta(0)
    # The first attempt is attempt 1; each restart starts the next from its checkpoint.
    lines = [f"attempt {n + 2}: resumed from checkpoint" for n in range(job.restart_count)]
    lines.append(f"job {job.job_id} ({job.name}) on {','.join(job.nodes) or 'no node yet'}")
    steps = int(ran.total_seconds() // 60) + 1
    for step in range(max(steps - 20, 0), steps):
        lines.append(f"step {step * 100:>6}  loss {2.5 / (1 + step * 0.1):.4f}")
    if job.state in TERMINAL_JOB_STATES:
        lines.append(f"finished: {job.state.lower()} (exit code {job.exit_code or 0})")
    return "".join(f"{line}\n" for line in lines)


def parse_sbatch_directives(script: str) -> dict[str, str]:
    """`#SBATCH --key=value` lines of a script, as the simulator needs them."""
    directives: dict[str, str] = {}
    for line in script.splitlines():
        stripped = line.strip()
        if not stripped.startswith("#SBATCH"):
            if stripped and not stripped.startswith("#"):
                break  # sbatch stops reading directives at the first command
            continue
        for token in stripped[len("#SBATCH") :].split():
            if not token.startswith("--"):
                continue
            key, _, value = token[2:].partition("=")
            directives[key] = value
    return directives


def _gpus_from_directives(directives: dict[str, str]) -> int:
    if "gpus-per-node" in directives:
        return int(directives["gpus-per-node"].split(":")[-1])
    gres = directives.get("gres", "")
    if gres.startswith("gpu"):
        return int(gres.split(":")[-1])
    return 0
