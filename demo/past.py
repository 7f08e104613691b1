"""Synthetic past for a cluster: months of node, job and fault history, written in bulk.

`manage.py demo --history-days 90` and the reports benchmark use it so the
managers' reports have something to show. It is a small discrete-event
simulation over the cluster's existing nodes (FIFO scheduling of whole nodes,
GPU faults at the simulator's field rate, a spare swapped in within minutes and
the faulty node repaired within hours) that writes the same append-only rows the
sync, the agent ingest and the remediation engine write. Deterministic under the
seed; every job still running when the history ends is recorded as completed then,
so nothing it writes looks active to the live sync.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from clusters.backends.simulated import (
    CRITICAL_XIDS,
    DEFAULT_XID_MIX,
    LLAMA3_GPU_RELATED_SHARE,
    LLAMA3_INTERRUPTIONS_PER_GPU_DAY,
    XID_MESSAGES,
    poisson,
    weighted_choice,
)
from clusters.models import Cluster, Node, NodeStateChange
from health.models import HealthEvent, Incident
from remediation import services
from remediation.models import (
    Action,
    JobEffect,
    Remediation,
    RemediationJob,
    RemediationStatusChange,
    RemediationStep,
    StepOutcome,
    Trigger,
)
from remediation.plans import plan_for
from remediation.transitions import RunStatus
from reports.rollups import clear_rollups

ACTOR = "history"
FIRST_JOB_ID = 50_000_000
BATCH = 5000
JOBS_PER_NODE_DAY = 0.55
CHECKPOINT_EVERY = timedelta(minutes=30)
REQUEUE_HOLD = timedelta(seconds=121)
FIELD_RATE = LLAMA3_INTERRUPTIONS_PER_GPU_DAY * LLAMA3_GPU_RELATED_SHARE


@dataclass
class HistoryStats:
    """How many rows a run wrote."""

    node_changes: int = 0
    jobs: int = 0
    job_changes: int = 0
    faults: int = 0
    remediations: int = 0


@dataclass
class _Node:
    row: Node
    base: str  # status when idle: idle, inference or spare
    status: str = ""
    job: _Job | None = None
    broken: bool = False


@dataclass
class _Job:
    slurm_id: int
    name: str
    user: str
    account: str
    partition: str
    nodes_wanted: int
    gpus_per_node: int
    work: timedelta
    submit: datetime
    nodes: list[_Node] = field(default_factory=list)
    changes: list[tuple[datetime, str, int]] = field(default_factory=list)
    progress: list[tuple[datetime, bool, int]] = field(default_factory=list)
    run: int = 0
    restarts: int = 0
    started: datetime | None = None
    first_start: datetime | None = None
    # Slurm's accounting keeps one record per attempt: (submitted, started, ended).
    attempts: list[tuple[datetime, datetime, datetime]] = field(default_factory=list)
    resubmitted: datetime | None = None  # a requeue is the next attempt's submit time


class _Generator:
    def __init__(self, cluster, nodes, start, end, seed, jobs, fault_rate):
        self.cluster, self.start, self.end = cluster, start, end
        self.rng = random.Random(seed)
        self.nodes = [_Node(row, _base_status(row)) for row in nodes]
        self.free: dict[str, list[_Node]] = {}
        for node in self.nodes:
            self.free.setdefault(_partition(node.row), []).append(node)
        self.sizes = {name: len(members) for name, members in self.free.items()}
        self.queue: dict[str, deque[_Job]] = {name: deque() for name in self.free}
        self.running: dict[int, _Job] = {}  # started and not finished, by slurm id
        self.events: list = []
        self.counter = 0
        self.job_count, self.fault_rate = jobs, fault_rate
        self.stats = HistoryStats()
        self.node_rows: list[NodeStateChange] = []
        self.finished: list[_Job] = []
        self.faults: list[tuple[datetime, _Node, int, int]] = []
        self.attempts: dict[int, list[tuple[datetime, datetime, datetime]]] = {}
        # Which job each fault stopped: the remediation run's record of requeuing it.
        self.stopped: dict[tuple[int, datetime], tuple[int, list[str]]] = {}

    # ------------------------------------------------------------ events
    def push(self, at: datetime, kind: str, *payload) -> None:
        self.counter += 1  # a tie-breaker keeps the heap from comparing payloads
        heapq.heappush(self.events, (at, self.counter, kind, payload))

    def run(self) -> HistoryStats:
        for node in self.nodes:
            self.set_status(node, self.start, "history starts")
        self.plan_submissions()
        self.plan_faults()
        while self.events:
            at, _, kind, payload = heapq.heappop(self.events)
            if at >= self.end:
                break
            getattr(self, f"on_{kind}")(at, *payload)
        for job in list(self.running.values()):
            self.finish(job, self.end)
        self.flush(force=True)
        self.write_faults()
        return self.stats

    def plan_submissions(self) -> None:
        seconds = (self.end - self.start).total_seconds()
        for index in range(self.job_count):
            at = self.start + timedelta(seconds=self.rng.random() * seconds)
            self.push(at, "submit", index)

    def plan_faults(self) -> None:
        days = (self.end - self.start).total_seconds() / 86400
        for node in self.nodes:
            expected = node.row.gpu_count * days * self.fault_rate
            for _ in range(poisson(self.rng, expected)):
                at = self.start + timedelta(days=self.rng.random() * days)
                self.push(at, "fault", node, self.rng.randrange(max(1, node.row.gpu_count)))

    # ------------------------------------------------------------ handlers
    def on_submit(self, at: datetime, index: int) -> None:
        job = self.new_job(index, at)
        if job.partition not in self.queue:
            return
        job.changes.append((at, "PENDING", 0))
        self.queue[job.partition].append(job)
        self.schedule(job.partition, at)

    def on_end(self, at: datetime, job: _Job, run: int) -> None:
        if run == job.run:
            self.finish(job, at)

    def on_restart(self, at: datetime, job: _Job) -> None:
        # A requeued job keeps its place at the head of the queue.
        self.queue[job.partition].appendleft(job)
        self.schedule(job.partition, at)

    def on_fault(self, at: datetime, node: _Node, gpu: int) -> None:
        xid = weighted_choice(self.rng, DEFAULT_XID_MIX)
        self.faults.append((at, node, gpu, xid))
        if xid not in CRITICAL_XIDS or node.broken:
            return
        # Out of service first, so the interrupted job cannot be rescheduled onto it.
        node.broken = True
        if node.job is None:
            self.free[_partition(node.row)].remove(node)
        self.set_status(node, at, f"XID {xid} on GPU {gpu}", "fail")
        if node.job is not None:
            names = [member.row.name for member in node.job.nodes]
            self.stopped[(node.row.pk, at)] = (node.job.slurm_id, names)
            self.interrupt(node.job, at)
        self.push(at + timedelta(hours=self.rng.uniform(4, 48)), "repaired", node)

    def on_repaired(self, at: datetime, node: _Node) -> None:
        node.broken = False
        self.free[_partition(node.row)].append(node)
        self.set_status(node, at, "repaired")
        self.schedule(_partition(node.row), at)

    # ------------------------------------------------------------ jobs
    def new_job(self, index: int, at: datetime) -> _Job:
        rng, kind = self.rng, self.rng.random()
        user = rng.choice(("alice", "bob", "carol", "dave"))
        if kind < 0.45:
            spec = ("pretrain", "llm", "train", rng.choice((2, 2, 4, 4, 8)), 8, rng.uniform(2, 18))
        elif kind < 0.85 or "infer" not in self.queue:
            spec = ("eval", "eval", "train", 1, rng.choice((1, 2, 4, 8)), rng.uniform(0.2, 1.5))
        else:
            user = "inference"
            spec = ("serve", "serving", "infer", 1, rng.choice((4, 8)), rng.uniform(6, 48))
        name, account, partition, nodes, gpus, work_hours = spec
        nodes = min(nodes, self.sizes.get(partition, 1))
        return _Job(
            slurm_id=FIRST_JOB_ID + index,
            name=f"{name}-{index % 1000:03d}",
            user=user,
            account=account,
            partition=partition,
            nodes_wanted=nodes,
            gpus_per_node=gpus,
            work=timedelta(hours=work_hours),
            submit=at,
        )

    def schedule(self, partition: str, at: datetime) -> None:
        """First fit, as the simulator schedules: any waiting job that fits starts now."""
        queue, free = self.queue[partition], self.free[partition]
        waiting: deque[_Job] = deque()
        while queue and free:
            job = queue.popleft()
            if len(free) >= job.nodes_wanted:
                self.start_job(job, at)
            else:
                waiting.append(job)
        waiting.extend(queue)
        self.queue[partition] = waiting

    def start_job(self, job: _Job, at: datetime) -> None:
        free = self.free[job.partition]
        self.running[job.slurm_id] = job
        job.nodes = [free.pop() for _ in range(job.nodes_wanted)]
        job.run += 1
        job.started, job.first_start = at, job.first_start or at
        job.changes.append((at, "RUNNING", job.restarts))
        for node in job.nodes:
            node.job = job
            self.set_status(node, at, "")
        if job.restarts:
            # The trainer reports its first step once the checkpoint is reloaded.
            resumed = at + timedelta(minutes=self.rng.uniform(2, 10))
            job.progress.append((resumed, False, job.restarts))
        self.push(at + job.work, "end", job, job.run)

    def release(self, job: _Job, at: datetime) -> None:
        for node in job.nodes:
            node.job = None
            if not node.broken:
                self.free[_partition(node.row)].append(node)
                self.set_status(node, at, "")
        job.nodes = []

    def interrupt(self, job: _Job, at: datetime) -> None:
        ran = at - job.started
        saved = CHECKPOINT_EVERY * int(ran / CHECKPOINT_EVERY)
        if saved:
            job.progress.append((job.started + saved, True, job.restarts))
        job.work -= saved
        job.attempts.append((job.resubmitted or job.submit, job.started, at))
        job.resubmitted = at
        job.restarts += 1
        job.run += 1  # the pending "end" event is now stale
        job.changes.append((at, "PENDING", job.restarts))
        self.release(job, at)
        self.push(at + REQUEUE_HOLD, "restart", job)
        self.schedule(job.partition, at)

    def finish(self, job: _Job, at: datetime) -> None:
        if job.started is not None:
            job.attempts.append((job.resubmitted or job.submit, job.started, at))
        job.changes.append((at, "COMPLETED", job.restarts))
        self.running.pop(job.slurm_id, None)
        job.run += 1
        self.release(job, at)
        self.schedule(job.partition, at)
        self.finished.append(job)
        self.flush()

    # ------------------------------------------------------------ rows
    def set_status(self, node: _Node, at: datetime, reason: str, status: str = "") -> None:
        if not status:
            status = node.base
            if node.job is not None:
                status = "allocated" if node.job.gpus_per_node >= node.row.gpu_count else "mixed"
                status = "inference" if node.base == "inference" else status
        if status == node.status:
            return
        self.node_rows.append(
            NodeStateChange(
                node=node.row,
                from_status=node.status,
                to_status=status,
                reason=reason,
                actor=ACTOR,
                at=at,
            )
        )
        node.status = status
        if len(self.node_rows) >= BATCH:
            self.flush_nodes()

    def flush_nodes(self) -> None:
        NodeStateChange.objects.bulk_create(self.node_rows, batch_size=BATCH)
        self.stats.node_changes += len(self.node_rows)
        self.node_rows = []

    def flush(self, *, force: bool = False) -> None:
        if not force and len(self.finished) < BATCH // 5:
            return
        from jobs.models import Job, JobStateChange

        jobs = Job.objects.bulk_create([self.job_row(job) for job in self.finished])
        changes, progress = [], []
        for row, job in zip(jobs, self.finished, strict=True):
            changes += _job_changes(row, job)
            progress += _progress_rows(row, job)
            self.attempts[job.slurm_id] = job.attempts
        JobStateChange.objects.bulk_create(changes, batch_size=BATCH)
        _create_progress(progress)
        self.stats.jobs += len(jobs)
        self.stats.job_changes += len(changes)
        self.finished = []
        if force:
            self.flush_nodes()

    def job_row(self, job: _Job):
        from jobs.models import Job

        end = job.changes[-1][0]
        return Job(
            cluster=self.cluster,
            slurm_id=job.slurm_id,
            name=job.name,
            user=job.user,
            account=job.account,
            partition=job.partition,
            state="COMPLETED",
            reason="None",
            node_count=job.nodes_wanted,
            gpus=job.nodes_wanted * job.gpus_per_node,
            submit_at=job.submit,
            start_at=job.first_start,
            end_at=end,
            restart_count=job.restarts,
            exit_code=0,
            updated_at=end,
        )

    def write_faults(self) -> None:
        events, incidents, runs, requeued = [], [], [], []
        for at, node, gpu, xid in self.faults:
            critical = xid in CRITICAL_XIDS
            severity = "critical" if critical else "warning"
            incident = Incident(
                node=node.row, gpu_index=gpu, opened_at=at, last_event_at=at,
                severity=severity, xids=[xid], event_count=1, summary=f"XID {xid}",
            )  # fmt: skip
            incidents.append(incident)
            events.append(
                HealthEvent(
                    node=node.row, incident=incident, kind="xid", xid=xid, gpu_index=gpu,
                    severity=severity, message=XID_MESSAGES.get(xid, f"Xid {xid}"),
                    observed_at=at, last_observed_at=at, received_at=at,
                    fold_key=f"history:{node.row.pk}:{gpu}:{xid}:{at.timestamp():.0f}",
                )
            )  # fmt: skip
            if critical:
                runs.append(self.replacement(node.row, at, xid, gpu, incident))
                if (node.row.pk, at) in self.stopped:
                    requeued.append((runs[-1], at, *self.stopped[(node.row.pk, at)]))
        Incident.objects.bulk_create(incidents, batch_size=BATCH)
        HealthEvent.objects.bulk_create(events, batch_size=BATCH)
        Remediation.objects.bulk_create(runs, batch_size=BATCH)
        _write_engine_rows(runs)
        # What the engine records when a run requeues a job: without it, ETTR could not
        # tell which run stopped a job, and counted no time waiting for a replacement.
        RemediationJob.objects.bulk_create(
            (
                RemediationJob(
                    remediation=run, slurm_job_id=slurm_id, effect=JobEffect.REQUEUED,
                    nodes=names, at=at,
                )
                for run, at, slurm_id, names in requeued
            ),
            batch_size=BATCH,
        )  # fmt: skip
        self.stats.faults, self.stats.remediations = len(events), len(runs)

    def replacement(self, node: Node, at: datetime, xid: int, gpu: int, incident) -> Remediation:
        created = at + timedelta(seconds=self.rng.uniform(10, 60))
        finished = created + timedelta(minutes=self.rng.uniform(3, 9))
        plan = plan_for(Action.REPLACE)
        return Remediation(
            node=node,
            action=Action.REPLACE,
            trigger=Trigger.HEALTH_EVENT,
            status=RunStatus.SUCCEEDED,
            reason=f"XID {xid} GPU {gpu}",
            planned_steps=plan,
            current_step=len(plan),
            incident=incident,
            created_at=created,
            updated_at=finished,
            due_at=created,
            finished_at=finished,
            message="all steps done",
        )


def _write_engine_rows(runs: list[Remediation]) -> None:
    """The rows the engine writes for a run that went straight through: its status
    changes (new -> running -> succeeded) and one succeeded row per planned step,
    spread over the run's time, so reports read what a real run leaves."""
    changes, steps = [], []
    for run in runs:
        changes += [
            RemediationStatusChange(
                remediation=run, from_status="", to_status=RunStatus.RUNNING,
                message=f"policy: {run.reason}", actor="engine", at=run.created_at,
            ),
            RemediationStatusChange(
                remediation=run, from_status=RunStatus.RUNNING, to_status=RunStatus.SUCCEEDED,
                message=run.message, actor="engine", at=run.finished_at,
            ),
        ]  # fmt: skip
        count = len(run.planned_steps)
        span = run.finished_at - run.created_at
        bounds = [run.created_at + span * index / count for index in range(count)]
        for index, name in enumerate(run.planned_steps):
            ended = bounds[index + 1] if index + 1 < count else run.finished_at
            steps.append(
                RemediationStep(
                    remediation=run, index=index, name=name, outcome=StepOutcome.SUCCEEDED,
                    worker=ACTOR, started_at=bounds[index], finished_at=ended,
                )
            )  # fmt: skip
    services.add_past_history(changes, batch_size=BATCH)
    RemediationStep.objects.bulk_create(steps, batch_size=BATCH)


def _job_changes(row, job: _Job) -> list:
    from jobs.models import JobStateChange

    changes, previous = [], ""
    for at, state, restarts in job.changes:
        changes.append(
            JobStateChange(
                job=row,
                from_state=previous,
                to_state=state,
                reason="requeued after a node fault" if state == "PENDING" and previous else "",
                actor=ACTOR,
                restart_count=restarts,
                at=at,
            )
        )
        previous = state
    return changes


def _progress_rows(row, job: _Job) -> list[tuple]:
    return [(row, at, saved, restarts) for at, saved, restarts in job.progress]


def _create_progress(rows: list[tuple]) -> None:
    from jobs.models import JobProgress

    JobProgress.objects.bulk_create(
        (
            JobProgress(
                job=job, step=index + 1, checkpoint_saved=saved, restart_count=restarts,
                reported_at=at,
            )
            for index, (job, at, saved, restarts) in enumerate(rows)
        ),
        batch_size=BATCH,
    )  # fmt: skip


def _base_status(node: Node) -> str:
    kind = node.pool.kind if node.pool_id else ""
    return {"inference": "inference", "spare": "spare"}.get(kind, "idle")


def _partition(node: Node) -> str:
    return (node.partition_names or "train").split(",")[0]


def generate_history(
    cluster: Cluster,
    days: int,
    *,
    seed: int = 42,
    end: datetime | None = None,
    jobs: int | None = None,
    fault_rate_per_gpu_day: float = FIELD_RATE,
) -> HistoryStats:
    """Write `days` of history for the cluster's nodes, ending at `end`.

    `end` defaults to where the cluster's recorded history begins (its first sync),
    or now. A cluster that already has generated history is left alone, so a
    restarted demo does not write it twice.
    """
    from jobs.models import Job

    nodes = list(Node.objects.filter(cluster=cluster).select_related("pool").order_by("name"))
    generated = Job.objects.filter(cluster=cluster, slurm_id__gte=FIRST_JOB_ID).exists()
    if days <= 0 or not nodes or generated:
        return HistoryStats()
    first = NodeStateChange.objects.filter(node__cluster=cluster).order_by("at").first()
    end = end or (first.at if first else timezone.now())
    if jobs is None:
        jobs = round(len(nodes) * days * JOBS_PER_NODE_DAY)
    start = end - timedelta(days=days)
    with transaction.atomic():
        generator = _Generator(cluster, nodes, start, end, seed, jobs, fault_rate_per_gpu_day)
        stats = generator.run()
        _write_accounting(cluster, generator.attempts)
        # History written into the past makes the cluster's daily rollups stale.
        clear_rollups(cluster)
        return stats


def _write_accounting(cluster: Cluster, attempts: dict[int, list[tuple]]) -> int:
    """Slurm's accounting of the generated jobs, as `import_accounting` stores what
    `sacct --duplicates` lists: one record per attempt, the requeued ones ending
    REQUEUED. With one record per job, the accounting report counted a requeued job's
    wait in the queue as GPU time and showed its requeued attempts as 0.0 GPU-h."""
    from clusters.backends.base import AccountingRecord
    from jobs.accounting import store_records
    from jobs.models import ACTIVE_JOB_STATES, Job

    finished = Job.objects.filter(
        cluster=cluster, slurm_id__gte=FIRST_JOB_ID, end_at__isnull=False
    ).exclude(state__in=ACTIVE_JOB_STATES)
    records = []
    for job in finished.iterator():
        runs = attempts.get(job.slurm_id) or [(job.submit_at, job.start_at, job.end_at)]
        for index, (submitted, started, ended) in enumerate(runs):
            final = index == len(runs) - 1
            records.append(
                AccountingRecord(
                    cluster=cluster.name,
                    job_id=job.slurm_id,
                    submit_time=submitted,
                    name=job.name,
                    user=job.user,
                    account=job.account,
                    partition=job.partition,
                    qos="normal",
                    state=job.state if final else "REQUEUED",
                    start_time=started,
                    end_time=ended,
                    elapsed_s=int((ended - started).total_seconds()) if started else 0,
                    gpus=job.gpus if started else 0,
                    nodes=tuple(job.node_names or ()),
                    exit_code=job.exit_code if final else None,
                    restart_count=index,
                )
            )
    store_records(cluster, records)
    return len(records)
