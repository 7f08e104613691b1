"""A simulated week of a pooled GPU fleet, under a static split and under a policy.

Deterministic for a seed, plain Python (no Django), so bench/capacity.py and the tests
run it anywhere. The same inputs drive both runs:

- Inference load: a daily curve peaking at 15:00 with a peak 3x the trough (a raised
  cosine squared, so the busy hours are narrower than the quiet ones), times a slow
  random wobble of a few percent. Load is counted in node-equivalents: one unit is
  what one node serves at full GPU utilization. A pool of n nodes serving load L runs
  at rho = L / n and answers with p95 latency LATENCY_BASE_MS + (LATENCY_FULL_MS -
  LATENCY_BASE_MS) * rho^2, rising steeply past rho = 1 (requests queue): latency
  goes over the 300 ms target exactly when the load exceeds what the pool serves.
- Training: jobs of 1 to 16 nodes arriving in bursts (a team's sweep, a paper
  deadline), with lognormal runtimes and time limits above them (as users set them),
  scaled so the week's offered node-hours are `training_demand` of the fleet.
- Slurm: FIFO with EASY backfill over the training pool's free nodes; the head job's
  start time is what `squeue --start` would report.

The static split sizes inference for the week's highest load at STATIC_HEADROOM of
the target (how a planner provisions a fixed pool: the peak stays at 80% of the SLO)
and gives training the rest. The policy run starts from the same split and calls
`rules.decide` every `decide_every_s`; a move takes `move_s` (drain done, partition
changed, node resumed) during which the node serves neither pool. A busy node chosen
to move is drained and moves when its job ends, as the to_inference plan does.

Figures: fleet GPU utilization (training nodes running jobs count fully, inference
nodes count the load they serve), training queue wait p50/p95 (jobs still waiting at
the end count with their wait so far, so a starved queue is not flattered), minutes
over the inference target, moves per node per day, and decide()'s time p95.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from demand import rules
from demand.rules import (
    DemandSnapshot,
    NodeState,
    Policy,
    Pool,
    RecentMove,
    Sample,
    TrainingQueue,
)

LATENCY_BASE_MS = 100.0
LATENCY_FULL_MS = 300.0
STATIC_HEADROOM = 0.8  # the static pool keeps the peak's latency at 80% of the target
START = datetime(2025, 3, 3, tzinfo=UTC)  # a Monday, midnight
JOB_SIZES = (1, 2, 4, 8, 16)
JOB_SIZE_WEIGHTS = (30, 20, 20, 20, 10)


@dataclass(frozen=True)
class WeekConfig:
    """The simulated fleet and its week."""

    nodes: int = 1024
    days: float = 7
    seed: int = 1
    step_s: int = 60
    decide_every_s: int = 60
    move_s: int = 120
    # The inference load's daily peak, as a share of the fleet's nodes (node-equivalents).
    inference_peak: float = 0.42
    peak_to_trough: float = 3.0
    # Offered training work, as a share of the fleet's node-hours over the week.
    training_demand: float = 0.64
    checkpointable_share: float = 0.7
    checkpoint_every_s: int = 1800


@dataclass(frozen=True)
class Job:
    job_id: int
    submit_s: int
    nodes: int
    runtime_s: int
    limit_s: int
    checkpointable: bool


@dataclass(frozen=True)
class Week:
    """The inputs both runs share."""

    config: WeekConfig
    load: tuple[float, ...]  # node-equivalents per step
    jobs: tuple[Job, ...]  # by submit time

    @property
    def steps(self) -> int:
        return len(self.load)


@dataclass
class Result:
    """One run's figures."""

    utilization_pct: float
    queue_wait_p50_s: float
    queue_wait_p95_s: float
    slo_minutes: float
    moves: int
    moves_per_node_day: float
    decision_ms_p95: float | None
    inference_nodes_min: int
    inference_nodes_max: int
    jobs_started: int
    jobs_waiting_at_end: int
    rules_fired: dict[str, int] = field(default_factory=dict)


def latency_ms(load: float, nodes: int) -> float:
    """The simulated serving p95 for `load` node-equivalents on `nodes` nodes."""
    if nodes <= 0:
        return math.inf if load > 0 else LATENCY_BASE_MS
    rho = load / nodes
    if rho <= 1:
        return LATENCY_BASE_MS + (LATENCY_FULL_MS - LATENCY_BASE_MS) * rho * rho
    return LATENCY_FULL_MS * rho**6


def static_inference_nodes(week: Week, target_ms: float = LATENCY_FULL_MS) -> int:
    """A fixed inference pool that keeps the week's highest load at the headroom."""
    aim = target_ms * STATIC_HEADROOM
    rho = math.sqrt((aim - LATENCY_BASE_MS) / (LATENCY_FULL_MS - LATENCY_BASE_MS))
    return math.ceil(max(week.load) / rho)


def make_week(config: WeekConfig = WeekConfig()) -> Week:
    rng = random.Random(config.seed)
    steps = int(config.days * 86400 // config.step_s)
    return Week(config, _load_curve(config, rng, steps), _training_jobs(config, rng, steps))


def _load_curve(config: WeekConfig, rng: random.Random, steps: int) -> tuple[float, ...]:
    peak = config.inference_peak * config.nodes
    trough = peak / config.peak_to_trough
    wobble, load = 0.0, []
    # An AR(1) wobble of a few percent, changing over tens of minutes, not per sample.
    keep = math.exp(-config.step_s / 1800)
    spread = 0.03 * math.sqrt(1 - keep * keep)
    for step in range(steps):
        hour = (step * config.step_s / 3600) % 24
        shape = ((1 + math.cos(2 * math.pi * (hour - 15) / 24)) / 2) ** 2
        wobble = wobble * keep + rng.gauss(0, spread)
        load.append((trough + (peak - trough) * shape) * (1 + wobble))
    return tuple(load)


def _training_jobs(config: WeekConfig, rng: random.Random, steps: int) -> tuple[Job, ...]:
    """Bursts of jobs, then the burst times stretched so the week offers exactly
    `training_demand` of the fleet's node-hours."""
    week_s = steps * config.step_s
    wanted = config.training_demand * config.nodes * week_s
    bursts, at, total = [], 0.0, 0.0
    while total < wanted:
        at += rng.expovariate(1.0)
        shapes = []
        for _ in range(rng.randint(1, 12)):
            runtime = min(12 * 3600, max(1200, rng.lognormvariate(math.log(7200), 0.8)))
            size = rng.choices(JOB_SIZES, JOB_SIZE_WEIGHTS)[0]
            limit = math.ceil(runtime * rng.uniform(1.2, 2.0) / 1800) * 1800
            ckpt = rng.random() < config.checkpointable_share
            shapes.append((size, int(runtime), limit, ckpt))
            total += size * int(runtime)
        bursts.append((at, shapes))
    scale = week_s / at
    jobs, ids = [], 1
    for at, shapes in bursts:
        submit = int(at * scale)
        if submit >= week_s:
            break
        for size, runtime, limit, ckpt in shapes:
            jobs.append(Job(ids, submit + len(jobs) % 7, size, runtime, limit, ckpt))
            ids += 1
    jobs.sort(key=lambda job: job.submit_s)
    return tuple(jobs)


class _Fleet:
    """The simulated cluster: pools, Slurm's queue and running jobs, moves in flight."""

    def __init__(self, week: Week, inference_nodes: int):
        config = week.config
        self.week, self.config = week, config
        self.names = [f"gpu-{i:04d}" for i in range(config.nodes)]
        # Training nodes first in name order, so both runs start from the same split.
        self.pool = [
            Pool.TRAINING if i < config.nodes - inference_nodes else Pool.INFERENCE
            for i in range(config.nodes)
        ]
        self.job_on: list[Job | None] = [None] * config.nodes
        self.job_limit_end: list[int] = [0] * config.nodes
        self.moving_to: list[Pool | None] = [None] * config.nodes
        self.in_transit_until: list[int] = [0] * config.nodes
        self.last_moved: list[int | None] = [None] * config.nodes
        self.free_training = {i for i in range(config.nodes) if self.pool[i] is Pool.TRAINING}
        self.serving_inference = inference_nodes
        self.pending: deque[tuple[Job, int]] = deque()  # (job, remaining runtime)
        self.running: list[tuple[int, int, Job, tuple[int, ...], int]] = []  # heap by end
        self.next_job = 0
        self.waits: dict[int, int] = {}
        self.busy_training = 0
        self.transits: list[tuple[int, int]] = []  # heap of (done_s, node)
        self.moves: list[RecentMove] = []
        self.moves_made = 0
        self.head_expected_start: int | None = None
        self.states: list[NodeState | None] = [None] * config.nodes

    # --- Slurm -----------------------------------------------------------------------

    def arrive(self, now: int) -> None:
        jobs = self.week.jobs
        while self.next_job < len(jobs) and jobs[self.next_job].submit_s <= now:
            job = jobs[self.next_job]
            self.pending.append((job, job.runtime_s))
            self.next_job += 1

    def finish(self, now: int) -> None:
        while self.running and self.running[0][0] <= now:
            _, _, job, nodes, _ = heapq.heappop(self.running)
            self._release(nodes, now)

    def _release(self, nodes: tuple[int, ...], now: int) -> None:
        for node in nodes:
            self.job_on[node] = None
            self.states[node] = None
            self.busy_training -= 1
            if self.moving_to[node] is not None:
                self._start_transit(node, now)
            else:
                self.free_training.add(node)

    def schedule(self, now: int) -> None:
        """FIFO with EASY backfill: later jobs start only if they cannot delay the head."""
        self.head_expected_start = None
        if not self.pending:
            return
        shadow, extra = None, 0
        index = 0
        while index < len(self.pending) and self.free_training:
            job, remaining = self.pending[index]
            free = len(self.free_training)
            if job.nodes <= free and (
                shadow is None or now + job.limit_s <= shadow or job.nodes <= extra
            ):
                if shadow is not None and now + job.limit_s > shadow:
                    extra -= job.nodes
                del self.pending[index]
                self._start(job, remaining, now)
                continue
            if shadow is None:
                shadow, extra = self._shadow(job, now)
            index += 1
        if self.pending and shadow is None:
            shadow, _ = self._shadow(self.pending[0][0], now)
        self.head_expected_start = shadow

    def _shadow(self, job: Job, now: int) -> tuple[int, int]:
        """When the head job can start by the running jobs' time limits, and the
        nodes to spare then."""
        free = len(self.free_training)
        for limit_end, nodes in sorted(
            (entry[4], sum(1 for n in entry[3] if self.moving_to[n] is None))
            for entry in self.running
        ):
            free += nodes
            if free >= job.nodes:
                return max(limit_end, now), free - job.nodes
        return now + 7 * 86400, 0

    def _start(self, job: Job, remaining: int, now: int) -> None:
        nodes = tuple(sorted(self.free_training)[: job.nodes])
        for node in nodes:
            self.free_training.discard(node)
            self.job_on[node] = job
            self.job_limit_end[node] = now + job.limit_s
            self.states[node] = None
        self.busy_training += len(nodes)
        self.waits.setdefault(job.job_id, now - job.submit_s)
        heapq.heappush(self.running, (now + remaining, job.job_id, job, nodes, now + job.limit_s))

    # --- moves -----------------------------------------------------------------------

    def apply(self, move: rules.Move, now: int) -> None:
        node = int(move.node.removeprefix("gpu-"))
        destination = move.direction.destination
        self.moving_to[node] = destination
        self.states[node] = None
        self.moves.append(RecentMove(move.node, move.direction, _at(now)))
        self.moves_made += 1
        if self.pool[node] is Pool.INFERENCE:
            self.serving_inference -= 1
            self._start_transit(node, now)
        elif self.job_on[node] is None:
            self.free_training.discard(node)
            self._start_transit(node, now)
        elif move.requeue:
            self._requeue(node, now)

    def _requeue(self, node: int, now: int) -> None:
        job = self.job_on[node]
        for i, entry in enumerate(self.running):
            if entry[2] is job:
                self.running[i] = self.running[-1]
                self.running.pop()
                heapq.heapify(self.running)
                started = entry[4] - job.limit_s
                done = now - started
                kept = done - done % self.config.checkpoint_every_s
                remaining = entry[0] - started - kept
                self.pending.appendleft((job, remaining))
                self._release(entry[3], now)
                return

    def _start_transit(self, node: int, now: int) -> None:
        heapq.heappush(self.transits, (now + self.config.move_s, node))

    def land(self, now: int) -> None:
        while self.transits and self.transits[0][0] <= now:
            _, node = heapq.heappop(self.transits)
            destination = self.moving_to[node]
            self.pool[node] = destination
            self.moving_to[node] = None
            self.last_moved[node] = now
            self.states[node] = None
            if destination is Pool.INFERENCE:
                self.serving_inference += 1
            else:
                self.free_training.add(node)
            for i in range(len(self.moves) - 1, -1, -1):
                if self.moves[i].node == self.names[node]:
                    self.moves[i] = RecentMove(
                        self.moves[i].node, self.moves[i].direction, self.moves[i].at, _at(now)
                    )
                    break

    # --- what the policy sees --------------------------------------------------------

    def node_states(self) -> list[NodeState]:
        """Every node as the policy sees it; only nodes that changed are built again
        (`states[i] = None` marks one), which keeps a 1,024-node week fast."""
        states = self.states
        for i, state in enumerate(states):
            if state is None:
                job, moved = self.job_on[i], self.last_moved[i]
                states[i] = NodeState(
                    name=self.names[i],
                    pool=self.pool[i],
                    busy=job is not None,
                    checkpointable=bool(job and job.checkpointable),
                    jobs_end_by=_at(self.job_limit_end[i]) if job else None,
                    last_moved_at=_at(moved) if moved is not None else None,
                    moving_to=self.moving_to[i],
                )
        return states

    def training_queue(self, now: int) -> TrainingQueue:
        pending = self.pending
        oldest = min((job.submit_s for job, _ in pending), default=now)
        expected = self.head_expected_start
        return TrainingQueue(
            partition="train",
            pending_jobs=len(pending),
            pending_nodes=sum(job.nodes for job, _ in pending),
            pending_gpus=8 * sum(job.nodes for job, _ in pending),
            longest_wait_s=float(now - oldest),
            at=_at(now),
            expected_start=_at(expected) if expected is not None and pending else None,
        )


def _at(seconds: int) -> datetime:
    return START + timedelta(seconds=seconds)


def run(week: Week, policy: Policy | None, inference_nodes: int) -> Result:
    """One run over the week: the static split if `policy` is None, else the policy."""
    config = week.config
    fleet = _Fleet(week, inference_nodes)
    window = int((policy.hysteresis_s if policy else 0) + 2 * config.decide_every_s)
    samples: deque[Sample] = deque(maxlen=max(2, window // config.step_s + 1))
    used, slo_steps, timings = 0.0, 0, []
    inference_sizes = []
    fired: dict[str, int] = {}
    for step in range(week.steps):
        now = step * config.step_s
        fleet.land(now)
        fleet.finish(now)
        fleet.arrive(now)
        fleet.schedule(now)
        load = week.load[step]
        latency = latency_ms(load, fleet.serving_inference)
        samples.append(Sample(round(latency, 1), _at(now)))
        if policy is not None and now % config.decide_every_s == 0:
            decision, spent = _decide(fleet, policy, samples, now)
            timings.append(spent)
            fired[str(decision.rule)] = fired.get(str(decision.rule), 0) + 1
            for move in decision.moves:
                fleet.apply(move, now)
            if decision.moves:
                fleet.schedule(now)
        served = min(load, fleet.serving_inference)
        used += fleet.busy_training + served
        inference_sizes.append(fleet.serving_inference)
        if latency > (policy.inference_target if policy else LATENCY_FULL_MS):
            slo_steps += 1
    return _result(week, fleet, used, slo_steps, timings, inference_sizes, fired)


def _decide(fleet: _Fleet, policy: Policy, samples, now: int):
    snapshot = DemandSnapshot(training=(fleet.training_queue(now),), inference_load=tuple(samples))
    nodes = fleet.node_states()
    hour_ago = _at(now - 3600)
    fleet.moves = [m for m in fleet.moves if m.at > hour_ago or m.done_at is None]
    started = time.perf_counter()
    decision = rules.decide(policy, snapshot, nodes, fleet.moves, _at(now))
    return decision, (time.perf_counter() - started) * 1000


def _result(week, fleet: _Fleet, used, slo_steps, timings, inference_sizes, fired) -> Result:
    config = week.config
    end = week.steps * config.step_s
    waits = list(fleet.waits.values())
    waits += [end - job.submit_s for job, _ in fleet.pending if job.job_id not in fleet.waits]
    days = week.steps * config.step_s / 86400
    return Result(
        utilization_pct=round(100 * used / (week.steps * config.nodes), 1),
        queue_wait_p50_s=round(percentile(waits, 50)),
        queue_wait_p95_s=round(percentile(waits, 95)),
        slo_minutes=round(slo_steps * config.step_s / 60, 1),
        moves=fleet.moves_made,
        moves_per_node_day=round(fleet.moves_made / config.nodes / days, 3),
        decision_ms_p95=round(percentile(timings, 95), 2) if timings else None,
        inference_nodes_min=min(inference_sizes),
        inference_nodes_max=max(inference_sizes),
        jobs_started=len(fleet.waits),
        jobs_waiting_at_end=len(fleet.pending),
        rules_fired=fired,
    )


def percentile(values, pct: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))]


def compare(config: WeekConfig = WeekConfig(), policy: Policy = rules.DEFAULT_POLICY) -> dict:
    """The static split and the policy on the same week, as the benchmark reports them."""
    week = make_week(config)
    split = static_inference_nodes(week, policy.inference_target)
    static = run(week, None, split)
    pooled = run(week, policy, split)
    return {"week": week, "static_inference_nodes": split, "static": static, "policy": pooled}
