"""The reallocation policy's decision: which nodes move between training and inference.

Plain Python on purpose (no Django, no ORM): the engine trigger, the "what if" replay
and the simulated week in bench/capacity.py all call the same `decide`, so what the
Capacity page replays is exactly what the engine would have done.

The rules, in the order they are tried:
1. Missing or stale data holds: a signal the policy needs that is absent, failed or
   older than `stale_after_s` means no move at all (never act on a guess).
2. A pool below its minimum gets nodes back from the other (pool_minimum).
3. Inference first: a load above SCALE_UP_ABOVE of the target for the whole hysteresis
   window, or inference work that Slurm or Kubernetes cannot place, takes training
   nodes (inference_over_target, inference_queued). A user-facing latency target is
   a promise; a training wait is a preference.
4. Training next: when a pending training job has waited (or, by Slurm's expected
   start, will have waited) longer than the training target, and the inference load
   has been below SCALE_DOWN_BELOW of its target for the hysteresis window, inference
   nodes the load does not need go to training (training_waiting).
5. Otherwise hold, and say why.

Which nodes: idle nodes first; a node running jobs is drained and moves when its jobs
end (the to_inference/to_training plans' wait_drained step), the soonest-ending
first; its jobs are checkpoint-requeued (after their grace) only when every job on it
is checkpointable and the policy allows it. A node another party holds, a node already
moving, and a node moved within the cooldown are never chosen. Pool minimums and
maximums, and the cap on moves per hour, bound every decision.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

# The inference load is kept inside a band below its target, as fractions of it.
# Above SCALE_UP_ABOVE (sustained) inference takes nodes; below SCALE_DOWN_BELOW it
# gives them up; each decision sizes the pool so the load would sit at AIM_AT. The
# band is what stops one noisy sample from moving hardware back and forth, and the
# margin under the target is the time a drained node needs to arrive.
SCALE_UP_ABOVE = 0.85
AIM_AT = 0.75
SCALE_DOWN_BELOW = 0.6


class Pool(StrEnum):
    TRAINING = "training"
    INFERENCE = "inference"


class Direction(StrEnum):
    TO_INFERENCE = "to_inference"
    TO_TRAINING = "to_training"

    @property
    def destination(self) -> Pool:
        return Pool.INFERENCE if self is Direction.TO_INFERENCE else Pool.TRAINING


class InferenceUnit(StrEnum):
    LATENCY_MS = "latency_ms"
    QUEUE_LENGTH = "queue_length"


class Mode(StrEnum):
    AUTOMATIC = "automatic"
    APPROVAL = "approval"


class Signal(StrEnum):
    """The demand signals a policy can weigh."""

    TRAINING = "training"  # Slurm: pending jobs per training partition
    INFERENCE_LOAD = "inference_load"  # Prometheus: the site's PromQL query
    INFERENCE_QUEUE = "inference_queue"  # Slurm: the inference partition's queue
    KUBERNETES = "kubernetes"  # pending inference pods, the HPA's desired replicas


class Rule(StrEnum):
    """Which rule fired; the holds say why nothing moved."""

    POOL_MINIMUM = "pool_minimum"
    INFERENCE_OVER_TARGET = "inference_over_target"
    INFERENCE_QUEUED = "inference_queued"
    TRAINING_WAITING = "training_waiting"
    HOLD_MISSING_SIGNAL = "hold_missing_signal"
    HOLD_STALE_SIGNAL = "hold_stale_signal"
    HOLD_HYSTERESIS = "hold_hysteresis"
    HOLD_UNDER_WAY = "hold_under_way"
    HOLD_POOL_LIMIT = "hold_pool_limit"
    HOLD_MOVE_CAP = "hold_move_cap"
    HOLD_NO_CANDIDATE = "hold_no_candidate"
    HOLD_INFERENCE_BUSY = "hold_inference_busy"
    HOLD_BALANCED = "hold_balanced"


@dataclass(frozen=True)
class Policy:
    """One training <-> inference pair's limits; the defaults are the page's defaults."""

    training_min_nodes: int = 0
    training_max_nodes: int | None = None  # None: no maximum
    inference_min_nodes: int = 1
    inference_max_nodes: int | None = None
    inference_target: float = 300.0
    inference_unit: InferenceUnit = InferenceUnit.LATENCY_MS
    # The longest a pending training job should wait before inference lends nodes.
    training_max_wait_s: int = 900
    # How long a condition must hold before it moves anything.
    hysteresis_s: int = 600
    # How long a moved node stays put.
    cooldown_s: int = 4 * 3600
    max_moves_per_hour: int = 64
    allow_checkpoint_requeue: bool = False
    mode: Mode = Mode.APPROVAL
    # A signal sampled longer ago than this is stale, and the policy holds.
    stale_after_s: int = 300
    # The signals the policy needs; any other signal present is weighed too.
    signals: frozenset[Signal] = frozenset({Signal.TRAINING, Signal.INFERENCE_LOAD})


DEFAULT_POLICY = Policy()


@dataclass(frozen=True)
class Sample:
    """One reading of the inference load (in the policy's unit) and when it was taken."""

    value: float
    at: datetime


@dataclass(frozen=True)
class TrainingQueue:
    """What waits in one training partition, as the sync read it from Slurm."""

    partition: str
    pending_jobs: int
    pending_nodes: int
    pending_gpus: int
    longest_wait_s: float
    at: datetime
    # Slurm's expected start (`squeue --start`) of the longest-waiting job, if known.
    expected_start: datetime | None = None

    def predicted_wait_s(self) -> float:
        """How long the oldest job will have waited when it starts, by Slurm's estimate."""
        if self.expected_start is None:
            return self.longest_wait_s
        ahead = max(0.0, (self.expected_start - self.at).total_seconds())
        return self.longest_wait_s + ahead


@dataclass(frozen=True)
class InferenceQueue:
    """The inference partition's own queue and allocation (inference served as Slurm jobs)."""

    partition: str
    pending_jobs: int
    pending_nodes: int
    allocated_nodes: int
    at: datetime


@dataclass(frozen=True)
class KubernetesDemand:
    """Inference pods Kubernetes cannot place and the replicas its autoscaler wants."""

    desired_replicas: int
    current_replicas: int
    pending_pods: int
    at: datetime
    pods_per_node: int = 1

    def unmet_nodes(self) -> int:
        unmet_pods = self.pending_pods + max(0, self.desired_replicas - self.current_replicas)
        return math.ceil(unmet_pods / max(1, self.pods_per_node))


@dataclass(frozen=True)
class DemandSnapshot:
    """The demand signals at one moment. None: the signal is missing (not read, or its
    source failed; `errors` says why, by Signal value)."""

    training: tuple[TrainingQueue, ...] | None = None
    # The load's recent samples, oldest first, reaching back at least the hysteresis.
    inference_load: tuple[Sample, ...] | None = None
    inference_queue: InferenceQueue | None = None
    kubernetes: KubernetesDemand | None = None
    errors: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeState:
    """One node of the pair's pools, as the decision needs to see it."""

    name: str
    pool: Pool
    busy: bool = False  # runs Slurm jobs
    held_by: str = ""  # another party holding it (an admin, Slurm, a repair), in words
    checkpointable: bool = False  # every job on it can be checkpoint-requeued
    jobs_end_by: datetime | None = None  # when its last job reaches its time limit
    last_moved_at: datetime | None = None
    moving_to: Pool | None = None  # a move already in flight


@dataclass(frozen=True)
class RecentMove:
    """A move the policy made: when it was decided and, once the node arrived, when."""

    node: str
    direction: Direction
    at: datetime
    done_at: datetime | None = None


@dataclass(frozen=True)
class Move:
    """One node to move. `waits_for_jobs`: it is drained and moves when its jobs end;
    `requeue`: its (checkpointable) jobs are requeued after their grace instead."""

    node: str
    direction: Direction
    waits_for_jobs: bool = False
    requeue: bool = False


@dataclass(frozen=True)
class Decision:
    """What the policy decided, which rule fired, the evidence and a sentence saying it."""

    rule: Rule
    moves: tuple[Move, ...]
    reason: str
    evidence: dict

    @property
    def holds(self) -> bool:
        return not self.moves


def validate(policy: Policy, total_nodes: int | None = None) -> dict[str, str]:
    """The policy's impossible values, by field name; empty when it can be saved.
    `total_nodes`: the pair's nodes, when known, to check the limits can all be met."""
    errors: dict[str, str] = {}
    for name in ("training_min_nodes", "inference_min_nodes"):
        if getattr(policy, name) < 0:
            errors[name] = "must be 0 or more"
    for pool in ("training", "inference"):
        low, high = getattr(policy, f"{pool}_min_nodes"), getattr(policy, f"{pool}_max_nodes")
        if high is not None and high < 0:
            errors[f"{pool}_max_nodes"] = "must be 0 or more"
        elif high is not None and low > high:
            errors[f"{pool}_min_nodes"] = f"exceeds the {pool} maximum of {high} nodes"
    errors.update(_target_errors(policy))
    errors.update(_timing_errors(policy))
    if total_nodes is not None:
        errors.update(_fleet_errors(policy, total_nodes))
    return errors


def _target_errors(policy: Policy) -> dict[str, str]:
    errors = {}
    if policy.inference_unit not in set(InferenceUnit):
        errors["inference_unit"] = f"must be one of {', '.join(InferenceUnit)}"
    elif not math.isfinite(policy.inference_target) or policy.inference_target <= 0:
        errors["inference_target"] = "must be above 0"
    elif policy.inference_unit == InferenceUnit.QUEUE_LENGTH and policy.inference_target < 1:
        # Below one waiting request the load could never sit under SCALE_DOWN_BELOW of it.
        errors["inference_target"] = "a queue-length target must be at least 1"
    if policy.training_max_wait_s <= 0:
        errors["training_max_wait_s"] = "must be above 0 seconds"
    if policy.mode not in set(Mode):
        errors["mode"] = f"must be one of {', '.join(Mode)}"
    unknown = {str(s) for s in policy.signals} - {str(s) for s in Signal}
    if unknown or not policy.signals:
        errors["signals"] = f"must be some of {', '.join(Signal)}"
    return errors


def _timing_errors(policy: Policy) -> dict[str, str]:
    errors = {}
    if policy.stale_after_s <= 0:
        errors["stale_after_s"] = "must be above 0 seconds"
    if policy.hysteresis_s < 0:
        errors["hysteresis_s"] = "must be 0 seconds or more"
    elif policy.hysteresis_s > 86400:
        errors["hysteresis_s"] = "must be at most a day"
    if policy.cooldown_s < 0:
        errors["cooldown_s"] = "must be 0 seconds or more"
    if policy.max_moves_per_hour < 1:
        # A policy that may never move is a policy turned off: say so with the switch.
        errors["max_moves_per_hour"] = "must be at least 1 (turn the policy off instead)"
    return errors


def _fleet_errors(policy: Policy, total: int) -> dict[str, str]:
    errors = {}
    if policy.training_min_nodes + policy.inference_min_nodes > total:
        errors["inference_min_nodes"] = (
            f"the two minimums add up to more than the pair's {total} nodes"
        )
    highs = (policy.training_max_nodes, policy.inference_max_nodes)
    if None not in highs and sum(highs) < total:
        errors["training_max_nodes"] = (
            f"the two maximums add up to less than the pair's {total} nodes"
        )
    return errors


@dataclass
class _Pools:
    """The pools as the decision counts them: where each node will be once moves land."""

    nodes: Sequence[NodeState]
    size: dict[Pool, int] = field(default_factory=dict)  # by destination
    serving: dict[Pool, int] = field(default_factory=dict)  # there now, not leaving
    incoming: dict[Pool, int] = field(default_factory=dict)
    idle: dict[Pool, int] = field(default_factory=dict)  # serving, idle, not held

    @classmethod
    def count(cls, nodes: Sequence[NodeState]) -> _Pools:
        size = {pool: 0 for pool in Pool}
        serving, incoming, idle = dict(size), dict(size), dict(size)
        for node in nodes:
            moving_to = node.moving_to
            if moving_to is not None and moving_to != node.pool:
                size[moving_to] += 1
                incoming[moving_to] += 1
                continue
            size[node.pool] += 1
            serving[node.pool] += 1
            if not node.busy and not node.held_by:
                idle[node.pool] += 1
        return cls(nodes, size, serving, incoming, idle)


def decide(
    policy: Policy,
    snapshot: DemandSnapshot,
    nodes: Sequence[NodeState],
    recent_moves: Iterable[RecentMove],
    now: datetime,
) -> Decision:
    """What the policy does now: moves with their evidence, or a hold with its reason."""
    recent_moves = list(recent_moves)
    pools = _Pools.count(nodes)
    evidence = _base_evidence(policy, snapshot, pools, now)
    held = _check_signals(policy, snapshot, now, evidence)
    if held:
        return held
    budget = _move_budget(policy, recent_moves, now)
    evidence["moves_last_hour"] = policy.max_moves_per_hour - budget
    for rule in (_pool_minimum, _inference_rule, _training_rule):
        decision = rule(policy, snapshot, pools, recent_moves, now, budget, evidence)
        if decision:
            return decision
    return _hold(Rule.HOLD_BALANCED, _balanced_reason(policy, snapshot, now, evidence), evidence)


def _hold(rule: Rule, reason: str, evidence: dict) -> Decision:
    return Decision(rule=rule, moves=(), reason=reason, evidence=evidence | {"rule": str(rule)})


def _move_budget(policy: Policy, recent_moves: list[RecentMove], now: datetime) -> int:
    hour_ago = now - timedelta(hours=1)
    made = sum(1 for move in recent_moves if move.at > hour_ago)
    return max(0, policy.max_moves_per_hour - made)


def _base_evidence(policy: Policy, snapshot: DemandSnapshot, pools: _Pools, now) -> dict:
    """The figures every decision records, whichever rule fires (JSON-ready)."""
    evidence: dict = {
        "at": now.isoformat(),
        "inference_target": policy.inference_target,
        "inference_unit": str(policy.inference_unit),
        "scale_up_above": round(policy.inference_target * SCALE_UP_ABOVE, 3),
        "scale_down_below": round(policy.inference_target * SCALE_DOWN_BELOW, 3),
        "training_max_wait_s": policy.training_max_wait_s,
        "hysteresis_s": policy.hysteresis_s,
        "pools": {
            str(pool): {
                "size": pools.size[pool],
                "serving": pools.serving[pool],
                "incoming": pools.incoming[pool],
                "idle": pools.idle[pool],
            }
            for pool in Pool
        },
    }
    if snapshot.inference_load:
        evidence["inference_load"] = snapshot.inference_load[-1].value
    if snapshot.training is not None:
        evidence["training_pending_jobs"] = sum(q.pending_jobs for q in snapshot.training)
        evidence["training_pending_nodes"] = sum(q.pending_nodes for q in snapshot.training)
        evidence["training_pending_gpus"] = sum(q.pending_gpus for q in snapshot.training)
        evidence["training_longest_wait_s"] = max(
            (q.longest_wait_s for q in snapshot.training if q.pending_jobs), default=0
        )
        evidence["training_predicted_wait_s"] = _predicted_wait(snapshot)
    if snapshot.inference_queue is not None:
        evidence["inference_pending_nodes"] = snapshot.inference_queue.pending_nodes
        evidence["inference_allocated_nodes"] = snapshot.inference_queue.allocated_nodes
    if snapshot.kubernetes is not None:
        evidence["kubernetes_unmet_nodes"] = snapshot.kubernetes.unmet_nodes()
    return evidence


def _predicted_wait(snapshot: DemandSnapshot) -> float:
    return max((q.predicted_wait_s() for q in snapshot.training or () if q.pending_jobs), default=0)


def _signal_times(snapshot: DemandSnapshot) -> dict[Signal, datetime | None]:
    """When each present signal was sampled (its newest reading); None if absent."""
    return {
        Signal.TRAINING: (
            min((q.at for q in snapshot.training), default=None)
            if snapshot.training is not None
            else None
        ),
        Signal.INFERENCE_LOAD: (
            snapshot.inference_load[-1].at if snapshot.inference_load else None
        ),
        Signal.INFERENCE_QUEUE: snapshot.inference_queue.at if snapshot.inference_queue else None,
        Signal.KUBERNETES: snapshot.kubernetes.at if snapshot.kubernetes else None,
    }


def _check_signals(policy, snapshot: DemandSnapshot, now: datetime, evidence) -> Decision | None:
    """A hold when a needed signal is missing or any signal present is stale."""
    times = _signal_times(snapshot)
    # An empty training tuple is a reading (no training partition has anything pending).
    present = {s for s, at in times.items() if at is not None}
    if snapshot.training is not None:
        present.add(Signal.TRAINING)
    missing = sorted(s for s in policy.signals if s not in present or s in snapshot.errors)
    if missing:
        why = "; ".join(
            f"{_SIGNAL_WORDS[s]}: {snapshot.errors.get(str(s), 'no reading')}" for s in missing
        )
        evidence["missing"] = [str(s) for s in missing]
        return _hold(Rule.HOLD_MISSING_SIGNAL, f"holding, no data: {why}", evidence)
    limit = timedelta(seconds=policy.stale_after_s)
    stale = sorted(s for s, at in times.items() if at is not None and now - at > limit)
    if stale:
        ages = "; ".join(
            f"{_SIGNAL_WORDS[s]} last read {_duration((now - times[s]).total_seconds())} ago"
            for s in stale
        )
        evidence["stale"] = [str(s) for s in stale]
        reason = f"holding, stale data: {ages} (limit {_duration(policy.stale_after_s)})"
        return _hold(Rule.HOLD_STALE_SIGNAL, reason, evidence)
    return None


_SIGNAL_WORDS = {
    Signal.TRAINING: "training queue",
    Signal.INFERENCE_LOAD: "inference load",
    Signal.INFERENCE_QUEUE: "inference partition queue",
    Signal.KUBERNETES: "Kubernetes inference pods",
}


def _pool_minimum(policy, snapshot, pools: _Pools, recent, now, budget, evidence):
    """A pool below its minimum (the policy was just edited) gets nodes from the other."""
    for pool, direction, low in (
        (Pool.INFERENCE, Direction.TO_INFERENCE, policy.inference_min_nodes),
        (Pool.TRAINING, Direction.TO_TRAINING, policy.training_min_nodes),
    ):
        short = low - pools.size[pool]
        if short > 0:
            reason = (
                f"{pool} pool has {_count(pools.size[pool], 'node')}, under its minimum of {low}"
            )
            return _move(policy, pools, direction, short, budget, now, Rule.POOL_MINIMUM, reason,
                         evidence)  # fmt: skip
    return None


def _inference_rule(policy, snapshot, pools: _Pools, recent, now, budget, evidence):
    """Inference over its band for the hysteresis, or work it cannot place: take nodes."""
    queued = _inference_queued_nodes(snapshot)
    load = _sustained(policy, snapshot, recent, now, above=True)
    evidence["inference_held_for_s"] = load.held_for_s
    if load.sustained:
        desired = math.ceil(pools.serving[Pool.INFERENCE] * load.level / _aim(policy))
        need = max(desired - pools.serving[Pool.INFERENCE], 1)
        rule, reason = Rule.INFERENCE_OVER_TARGET, _over_words(policy, load)
    elif queued:
        need, rule = queued, Rule.INFERENCE_QUEUED
        reason = f"{queued} inference nodes' worth of work waits unplaced"
    elif load.above_now:
        return _hold(Rule.HOLD_HYSTERESIS, _not_yet_words(policy, load, "above"), evidence)
    else:
        return None
    evidence["inference_nodes_needed"] = need
    need -= pools.incoming[Pool.INFERENCE]
    if need <= 0:
        reason += f"; {_count(pools.incoming[Pool.INFERENCE], 'node')} already on their way"
        return _hold(Rule.HOLD_UNDER_WAY, reason, evidence)
    reason += "; " + _training_words(policy, snapshot, pools)
    return _move(policy, pools, Direction.TO_INFERENCE, need, budget, now, rule, reason, evidence)


def _training_rule(policy, snapshot, pools: _Pools, recent, now, budget, evidence):
    """Training jobs waiting past the target while inference has room: lend nodes."""
    pending = sum(q.pending_nodes for q in snapshot.training or ())
    waited = _predicted_wait(snapshot)
    if pending <= 0 or waited <= policy.training_max_wait_s:
        return None
    need = pending - pools.idle[Pool.TRAINING] - pools.incoming[Pool.TRAINING]
    queue_words = _training_words(policy, snapshot, pools)
    if need <= 0:
        if pools.incoming[Pool.TRAINING]:
            on_their_way = _count(pools.incoming[Pool.TRAINING], "node")
            reason = f"{queue_words}; {on_their_way} already on their way"
        else:
            reason = f"{queue_words}, but training has idle nodes for it"
        return _hold(Rule.HOLD_UNDER_WAY, reason, evidence)
    spare, words = _inference_spare(policy, snapshot, pools, recent, now, evidence)
    if spare <= 0:
        return _hold(Rule.HOLD_INFERENCE_BUSY, f"{queue_words}, but {words}", evidence)
    evidence["inference_spare_nodes"] = spare
    reason = f"{words}; {queue_words}"
    count = min(need, spare)
    return _move(policy, pools, Direction.TO_TRAINING, count, budget, now, Rule.TRAINING_WAITING,
                 reason, evidence)  # fmt: skip


def _inference_spare(policy, snapshot, pools: _Pools, recent, now, evidence):
    """How many inference nodes the load has not needed for the hysteresis, in words too."""
    if _inference_queued_nodes(snapshot):
        return 0, "inference has work waiting to be placed"
    load = _sustained(policy, snapshot, recent, now, above=False)
    evidence["inference_held_for_s"] = load.held_for_s
    if load.latest is None:
        # Inference served only as Slurm jobs: what its partition leaves idle is spare.
        if snapshot.inference_queue is None:
            return 0, "no inference signal says what inference can spare"
        idle = pools.idle[Pool.INFERENCE]
        return idle, f"{_count(idle, 'idle inference node')} and no inference work waiting"
    if not load.sustained:
        return 0, _not_yet_words(policy, load, "below")
    serving = pools.serving[Pool.INFERENCE]
    needed = max(1, math.ceil(serving * load.level / _aim(policy)))
    return serving - needed, _under_words(policy, load)


def _inference_queued_nodes(snapshot: DemandSnapshot) -> int:
    queued = 0
    if snapshot.inference_queue is not None:
        queued = snapshot.inference_queue.pending_nodes
    if snapshot.kubernetes is not None:
        queued = max(queued, snapshot.kubernetes.unmet_nodes())
    return queued


def _aim(policy: Policy) -> float:
    return policy.inference_target * AIM_AT


@dataclass(frozen=True)
class _Load:
    """The inference load judged over the hysteresis window."""

    sustained: bool  # past the band's edge for the whole window
    above_now: bool  # the newest sample is past the edge
    level: float | None  # the window's least extreme value (what held all along)
    held_for_s: float  # how long the newest run of samples past the edge has lasted
    latest: float | None


def _sustained(policy, snapshot, recent: list[RecentMove], now, *, above: bool) -> _Load:
    """Whether the load stayed past the band's edge for the whole hysteresis, and the
    level it held. The level is read only from samples taken since the inference pool
    last changed size (a node arrived, or one left to drain for training): earlier
    samples measured another pool, and sizing from them would move the same demand
    twice. The hysteresis itself spans the change: a load still high after nodes
    arrived is still high."""
    samples = snapshot.inference_load or ()
    if not samples:
        return _Load(False, False, None, 0.0, None)
    edge = policy.inference_target * (SCALE_UP_ABOVE if above else SCALE_DOWN_BELOW)
    changed = _inference_changed_at(recent, now)
    run: list[Sample] = []
    for sample in reversed(samples):
        if not (sample.value > edge if above else sample.value < edge):
            break
        run.append(sample)
    latest = samples[-1].value
    if not run:
        return _Load(False, False, latest, 0.0, latest)
    held_for = (now - run[-1].at).total_seconds()
    current = [s.value for s in run if changed is None or s.at >= changed] or [latest]
    level = min(current) if above else max(current)
    return _Load(held_for >= policy.hysteresis_s, True, level, held_for, latest)


def _inference_changed_at(recent: list[RecentMove], now: datetime) -> datetime | None:
    """When the inference pool last changed what it serves with: a node arriving, or
    one leaving (it stops serving as soon as it drains)."""
    times = [
        m.done_at if m.direction is Direction.TO_INFERENCE else m.at
        for m in recent
        if (m.done_at if m.direction is Direction.TO_INFERENCE else m.at)
    ]
    return max((t for t in times if t <= now), default=None)


def _move(policy, pools: _Pools, direction, count, budget, now, rule, reason, evidence):
    """Up to `count` moves the limits allow, the best candidates first, or a hold."""
    source = Pool.TRAINING if direction is Direction.TO_INFERENCE else Pool.INFERENCE
    room = _room(policy, pools, direction)
    evidence["wanted"] = count
    if room <= 0:
        limit = _limit_words(policy, pools, direction)
        return _hold(Rule.HOLD_POOL_LIMIT, f"{reason}; but {limit}", evidence)
    if budget <= 0:
        cap = f"the cap of {policy.max_moves_per_hour} moves an hour is reached"
        return _hold(Rule.HOLD_MOVE_CAP, f"{reason}; but {cap}", evidence)
    candidates = _candidates(policy, pools.nodes, source, now)
    moves = tuple(
        Move(node.name, direction, waits_for_jobs=node.busy, requeue=requeue)
        for node, requeue in candidates[: min(count, room, budget)]
    )
    if not moves:
        return _hold(Rule.HOLD_NO_CANDIDATE, f"{reason}; but {_no_candidate_words(source)}",
                     evidence)  # fmt: skip
    evidence["moves"] = [move.node for move in moves]
    reason += "; " + _moves_words(moves, count)
    return Decision(rule=rule, moves=moves, reason=reason, evidence=evidence | {"rule": str(rule)})


def _room(policy: Policy, pools: _Pools, direction: Direction) -> int:
    """How many nodes may move in `direction` without crossing a minimum or maximum."""
    dest = direction.destination
    source = Pool.TRAINING if dest is Pool.INFERENCE else Pool.INFERENCE
    if dest is Pool.INFERENCE:
        source_min, dest_max = policy.training_min_nodes, policy.inference_max_nodes
    else:
        source_min, dest_max = policy.inference_min_nodes, policy.training_max_nodes
    room = pools.size[source] - source_min
    if dest_max is not None:
        room = min(room, dest_max - pools.size[dest])
    return room


def _candidates(policy: Policy, nodes, source: Pool, now) -> list[tuple[NodeState, bool]]:
    """The source pool's movable nodes, best first: idle, then (if the policy allows)
    checkpointable ones to requeue, then busy ones by when their jobs end."""
    cooled = now - timedelta(seconds=policy.cooldown_s)
    ranked = []
    for node in nodes:
        if node.pool != source or node.held_by or node.moving_to:
            continue
        if node.last_moved_at and node.last_moved_at > cooled:
            continue
        # Only training jobs are requeued by policy: inference work is what it protects.
        requeue = (
            node.busy
            and node.checkpointable
            and policy.allow_checkpoint_requeue
            and source is Pool.TRAINING
        )
        tier = 0 if not node.busy else (1 if requeue else 2)
        ends = node.jobs_end_by or datetime.max.replace(tzinfo=now.tzinfo)
        ranked.append(((tier, ends, node.name), node, requeue))
    ranked.sort(key=lambda item: item[0])
    return [(node, requeue) for _, node, requeue in ranked]


def _limit_words(policy: Policy, pools: _Pools, direction: Direction) -> str:
    dest = direction.destination
    if dest is Pool.INFERENCE:
        high, low = policy.inference_max_nodes, policy.training_min_nodes
    else:
        high, low = policy.training_max_nodes, policy.inference_min_nodes
    source = Pool.TRAINING if dest is Pool.INFERENCE else Pool.INFERENCE
    if high is not None and pools.size[dest] >= high:
        return f"{dest} is at its maximum of {high} nodes"
    return f"{source} is at its minimum of {low} nodes"


def _no_candidate_words(source: Pool) -> str:
    return (
        f"no {source} node can move (each is held by another party, already moving "
        "or in its cooldown)"
    )


def _count(number: int, noun: str) -> str:
    """'1 node', '2 nodes': the sentences are read by people."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _moves_words(moves: tuple[Move, ...], wanted: int) -> str:
    idle = sum(1 for m in moves if not m.waits_for_jobs)
    requeued = sum(1 for m in moves if m.requeue)
    waiting = len(moves) - idle - requeued
    parts = [f"{idle} idle"] if idle else []
    if requeued:
        parts.append(f"{requeued} with checkpointable jobs to requeue")
    if waiting:
        parts.append(f"{waiting} moving when their jobs end")
    destination = moves[0].direction.destination
    words = f"moving {_count(len(moves), 'node')} to {destination} ({', '.join(parts)})"
    if len(moves) < wanted:
        words += f" of {wanted} wanted"
    return words


def _unit(policy: Policy, value: float) -> str:
    # Whole milliseconds and one decimal of a queue: a person compares them to a target.
    if policy.inference_unit == InferenceUnit.LATENCY_MS:
        return f"{round(value):g} ms"
    return f"{round(value, 1):g} waiting"


def _load_name(policy: Policy) -> str:
    latency = policy.inference_unit == InferenceUnit.LATENCY_MS
    return "inference p95" if latency else "inference queue"


def _over_words(policy: Policy, load: _Load) -> str:
    target = policy.inference_target
    name, held = _load_name(policy), _duration(load.held_for_s)
    if load.level > target:
        return f"{name} {_unit(policy, load.latest)} > target {_unit(policy, target)} for {held}"
    edge = target * SCALE_UP_ABOVE
    return (
        f"{name} {_unit(policy, load.latest)} > {_unit(policy, round(edge, 1))} "
        f"({SCALE_UP_ABOVE:.0%} of the {_unit(policy, target)} target) for {held}"
    )


def _under_words(policy: Policy, load: _Load) -> str:
    target = policy.inference_target
    return (
        f"{_load_name(policy)} {_unit(policy, load.latest)} < "
        f"{_unit(policy, round(target * SCALE_DOWN_BELOW, 1))} "
        f"({SCALE_DOWN_BELOW:.0%} of the {_unit(policy, target)} target) "
        f"for {_duration(load.held_for_s)}"
    )


def _not_yet_words(policy: Policy, load: _Load, side: str) -> str:
    edge = policy.inference_target * (SCALE_UP_ABOVE if side == "above" else SCALE_DOWN_BELOW)
    if not load.above_now:
        return f"{_load_name(policy)} {_unit(policy, load.latest)} is not {side} " + (
            f"{_unit(policy, round(edge, 1))}"
        )
    return (
        f"{_load_name(policy)} {_unit(policy, load.latest)} {side} "
        f"{_unit(policy, round(edge, 1))} for {_duration(load.held_for_s)} of the "
        f"{_duration(policy.hysteresis_s)} hysteresis"
    )


def _training_words(policy: Policy, snapshot: DemandSnapshot, pools: _Pools) -> str:
    queues = snapshot.training or ()
    pending = sum(q.pending_nodes for q in queues)
    idle = pools.idle[Pool.TRAINING]
    if not pending:
        return f"{_count(idle, 'idle training node')}; training queue empty"
    jobs = sum(q.pending_jobs for q in queues)
    words = (
        f"training queue {_count(jobs, 'job')} for {_count(pending, 'node')}, waiting "
        f"{_duration(max(q.longest_wait_s for q in queues))}"
    )
    predicted = _predicted_wait(snapshot)
    if predicted > max(q.longest_wait_s for q in queues) + 60:
        words += f" ({_duration(predicted)} by Slurm's expected start)"
    return (
        words
        + f" (target {_duration(policy.training_max_wait_s)}); {_count(idle, 'idle training node')}"
    )


def _balanced_reason(policy, snapshot, now, evidence) -> str:
    parts = []
    if snapshot.inference_load:
        value = snapshot.inference_load[-1].value
        parts.append(
            f"{_load_name(policy)} {_unit(policy, value)} within "
            f"{_unit(policy, round(policy.inference_target * SCALE_DOWN_BELOW, 1))}–"
            f"{_unit(policy, round(policy.inference_target * SCALE_UP_ABOVE, 1))}"
            if value >= policy.inference_target * SCALE_DOWN_BELOW
            else f"{_load_name(policy)} {_unit(policy, value)} leaves room"
        )
    pending = evidence.get("training_pending_nodes", 0)
    if pending:
        parts.append(
            f"training queue waiting {_duration(evidence['training_predicted_wait_s'])} "
            f"(target {_duration(policy.training_max_wait_s)})"
        )
    else:
        parts.append("training queue empty")
    return "holding, balanced: " + "; ".join(parts)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    hours, minutes = divmod(seconds // 60, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"
