"""What if: a policy replayed over recorded demand with nothing moved.

The input is a plain list of Frames, oldest first, one per recorded sampling moment:

    Frame(at=datetime, snapshot=DemandSnapshot, nodes=[NodeState, ...])

`snapshot` is what the signal sources recorded then (its inference_load holds the
samples up to `at`, reaching back the hysteresis, as the engine would pass them);
`nodes` is the pair's nodes as the sync recorded them. Plain (at, snapshot, nodes)
tuples are accepted too, and any iterable (a generator reading history page by page).

The replay keeps its own overlay of the moves it would have made: a node it moved is
shown to the policy in its new pool from then on (a busy node it sent to inference
arrives when the record first shows it idle, as the drain would have waited), and
its own moves feed the cooldown and the hourly cap. What the record cannot say is
estimated, and named so:
- GPU-hours gained for training: nodes lent to training, up to the nodes the
  recorded training queue was waiting for, less recorded-busy training nodes taken
  away, times their GPUs and the time to the next frame.
- the inference load on a pool of another size: the recorded value scaled by
  recorded serving nodes / replayed serving nodes (the policy's own proportional
  model), for the minutes over the target.
- training wait: the minutes the recorded queue waited past the training target,
  and of those, the minutes the lent nodes did not cover its pending nodes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime

from demand.rules import (
    DemandSnapshot,
    Direction,
    Move,
    NodeState,
    Policy,
    Pool,
    RecentMove,
    Sample,
    decide,
)


@dataclass(frozen=True)
class Frame:
    """One recorded moment: the demand signals and the pair's nodes."""

    at: datetime
    snapshot: DemandSnapshot
    nodes: tuple[NodeState, ...] | list[NodeState]


@dataclass(frozen=True)
class ReplayedMove:
    """A move the policy would have made, with the rule and the sentence it gave."""

    at: datetime
    move: Move
    rule: str
    reason: str


@dataclass
class ReplayResult:
    """What the policy would have done over the record, and what it would have changed."""

    moves: list[ReplayedMove] = field(default_factory=list)
    holds: dict[str, int] = field(default_factory=dict)  # hold rule -> frames
    gpu_hours_gained_for_training: float = 0.0
    minutes_over_target_recorded: float = 0.0
    minutes_over_target_estimated: float = 0.0
    training_wait_past_target_minutes: float = 0.0
    training_wait_past_target_uncovered_minutes: float = 0.0
    frames: int = 0


@dataclass
class _Overlay:
    """The replay's own moves: where each node is, and since when."""

    pool: dict[str, Pool] = field(default_factory=dict)  # landed
    moved_at: dict[str, datetime] = field(default_factory=dict)
    arriving: dict[str, Pool] = field(default_factory=dict)  # draining, not landed
    recent: list[RecentMove] = field(default_factory=list)


def replay(policy: Policy, frames: Iterable, gpus_per_node: int = 8) -> ReplayResult:
    """Runs `policy` over `frames` (oldest first) and returns what it would have done."""
    result, overlay = ReplayResult(), _Overlay()
    frames = [f if isinstance(f, Frame) else Frame(*f) for f in frames]
    for index, frame in enumerate(frames):
        _land(overlay, frame)
        nodes, lent, taken_busy = _view(overlay, frame)
        snapshot = _adjusted(policy, frame, nodes, lent)
        decision = decide(policy, snapshot, nodes, overlay.recent, frame.at)
        result.frames += 1
        if decision.holds:
            result.holds[str(decision.rule)] = result.holds.get(str(decision.rule), 0) + 1
        for move in decision.moves:
            _apply(overlay, frame, move)
            result.moves.append(ReplayedMove(frame.at, move, str(decision.rule), decision.reason))
        if index + 1 < len(frames):
            # Scored as the pools stand after this frame's moves, until the next frame.
            if decision.moves:
                nodes, lent, taken_busy = _view(overlay, frame)
                snapshot = _adjusted(policy, frame, nodes, lent)
            hours = (frames[index + 1].at - frame.at).total_seconds() / 3600
            _score(result, policy, frame, snapshot, lent, taken_busy, hours, gpus_per_node)
    return result


def _land(overlay: _Overlay, frame: Frame) -> None:
    """Nodes sent away while busy arrive once the record shows them idle."""
    for node in frame.nodes:
        destination = overlay.arriving.get(node.name)
        if destination and not node.busy:
            del overlay.arriving[node.name]
            overlay.pool[node.name] = destination
            overlay.moved_at[node.name] = frame.at
            for i in range(len(overlay.recent) - 1, -1, -1):
                if overlay.recent[i].node == node.name:
                    overlay.recent[i] = replace(overlay.recent[i], done_at=frame.at)
                    break


def _apply(overlay: _Overlay, frame: Frame, move: Move) -> None:
    overlay.recent.append(RecentMove(move.node, move.direction, frame.at))
    destination = move.direction.destination
    if move.waits_for_jobs and not move.requeue:
        overlay.arriving[move.node] = destination
        return
    overlay.pool[move.node] = destination
    overlay.moved_at[move.node] = frame.at
    overlay.recent[-1] = replace(overlay.recent[-1], done_at=frame.at)


def _view(overlay: _Overlay, frame: Frame) -> tuple[list[NodeState], int, int]:
    """The nodes as the replayed policy would see them; how many it has lent to
    training and how many recorded-busy training nodes it has taken."""
    nodes, lent, taken_busy = [], 0, 0
    for node in frame.nodes:
        pool = overlay.pool.get(node.name, node.pool)
        moved = overlay.moved_at.get(node.name, node.last_moved_at)
        arriving = overlay.arriving.get(node.name)
        if pool != node.pool:
            lent += pool is Pool.TRAINING
            taken_busy += pool is Pool.INFERENCE and node.busy
            # What the node would have run in its new pool the record cannot say.
            node = replace(node, busy=False, checkpointable=False, jobs_end_by=None)
        nodes.append(replace(node, pool=pool, last_moved_at=moved, moving_to=arriving))
    return nodes, lent, taken_busy


def _adjusted(policy: Policy, frame: Frame, nodes, lent: int) -> DemandSnapshot:
    """The recorded snapshot as the replayed pools would have seen it: training work
    the lent nodes absorbed is no longer pending, and the load is scaled to the
    replayed inference pool."""
    snapshot = frame.snapshot
    if snapshot.training and lent:
        left, queues = lent, []
        for queue in snapshot.training:
            absorbed = min(left, queue.pending_nodes)
            left -= absorbed
            queues.append(replace(queue, pending_nodes=queue.pending_nodes - absorbed))
        snapshot = replace(snapshot, training=tuple(queues))
    ratio = _serving_ratio(frame.nodes, nodes)
    if snapshot.inference_load and ratio != 1:
        scaled = tuple(Sample(round(s.value * ratio, 3), s.at) for s in snapshot.inference_load)
        snapshot = replace(snapshot, inference_load=scaled)
    return snapshot


def _serving_ratio(recorded, replayed) -> float:
    def serving(nodes) -> int:
        return sum(1 for n in nodes if n.pool is Pool.INFERENCE and not n.moving_to)

    now = serving(replayed)
    return serving(recorded) / now if now else 1.0


def _score(result, policy, frame: Frame, snapshot, lent, taken_busy, hours, gpus) -> None:
    recorded_pending = sum(q.pending_nodes for q in frame.snapshot.training or ())
    gained_nodes = min(lent, recorded_pending) - taken_busy
    result.gpu_hours_gained_for_training += gained_nodes * gpus * hours
    minutes = hours * 60
    target = policy.inference_target
    if frame.snapshot.inference_load:
        if frame.snapshot.inference_load[-1].value > target:
            result.minutes_over_target_recorded += minutes
        if snapshot.inference_load[-1].value > target:
            result.minutes_over_target_estimated += minutes
    waited = max(
        (q.predicted_wait_s() for q in frame.snapshot.training or () if q.pending_jobs),
        default=0,
    )
    if waited > policy.training_max_wait_s:
        result.training_wait_past_target_minutes += minutes
        if lent < recorded_pending:
            result.training_wait_past_target_uncovered_minutes += minutes


def directions(result: ReplayResult) -> dict[str, int]:
    """How many moves went each way."""
    counts = {str(d): 0 for d in Direction}
    for replayed in result.moves:
        counts[str(replayed.move.direction)] += 1
    return counts
