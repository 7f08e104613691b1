"""What a decision sees: the demand snapshot from the stored samples, the pair's nodes and
the policy's recent moves, in the plain shapes of `demand.rules`.

The snapshot is read from the latest sample pass at or before the moment decided for,
never from the live sources: the decision, its evidence on the run page and the replay
then rest on the same recorded figures. A figure the pass could not read makes its
signal missing, with the reason the source gave.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.db.models import Max

from clusters.models import Node, NodeState, NodeStatus, PoolKind
from demand import rules
from demand.models import DemandSample, Metric, ReallocationPolicy
from jobs.models import Job, JobState
from remediation.actions import last_checkpoints
from remediation.models import Action, Remediation, Trigger
from remediation.transitions import ACTIVE, RunStatus

MOVES = (Action.TO_INFERENCE, Action.TO_TRAINING)
DIRECTION = {Action.TO_INFERENCE: rules.Direction.TO_INFERENCE,
             Action.TO_TRAINING: rules.Direction.TO_TRAINING}  # fmt: skip
BUSY_STATES = (NodeState.ALLOCATED, NodeState.MIXED)
# Where a node is out of service by someone else's hand (or Slurm's), not Medbay's move.
OUT_OF_SERVICE = (NodeStatus.DOWN, NodeStatus.FAIL, NodeStatus.IN_REPAIR)
# How far back the newest sample pass is looked for: older than this, the signals are
# simply missing (a stale one within it is judged stale by the rules, with its age).
LOOKBACK = timedelta(days=1)
RECENT_MOVES = timedelta(days=1)


# ------------------------------------------------------------------ the snapshot
def latest_pass(cluster_id: int, now: datetime) -> datetime | None:
    found = DemandSample.objects.filter(
        cluster_id=cluster_id, sampled_at__lte=now, sampled_at__gt=now - LOOKBACK
    ).aggregate(at=Max("sampled_at"))
    return found["at"]


def snapshot_for(policy: ReallocationPolicy, now: datetime) -> rules.DemandSnapshot:
    """The demand as the latest sample pass at or before NOW recorded it."""
    at = latest_pass(policy.cluster_id, now)
    if at is None:
        why = "no demand samples yet (the sync samples every MEDBAY_DEMAND_SAMPLE_S)"
        return rules.DemandSnapshot(errors={str(s): why for s in rules.Signal})
    rows = list(DemandSample.objects.filter(cluster_id=policy.cluster_id, sampled_at=at))
    errors: dict[str, str] = {}
    training = _training(rows, at, errors)
    queue = _inference_queue(rows, at, policy, errors)
    kubernetes = _kubernetes(rows, at, errors)
    load = _inference_load(policy, now, rows, errors)
    return rules.DemandSnapshot(
        training=training,
        inference_load=load,
        inference_queue=queue,
        kubernetes=kubernetes,
        errors=errors,
    )


def _by_scope(rows, metrics) -> dict[str, dict[str, DemandSample]]:
    found: dict[str, dict[str, DemandSample]] = defaultdict(dict)
    for row in rows:
        if row.metric in metrics:
            found[row.scope][row.metric] = row
    return found


def _first_missing(figures: dict[str, DemandSample], needed) -> str:
    for metric in needed:
        row = figures.get(metric)
        if row is None:
            return f"{Metric(metric).label} was not read"
        if row.value is None:
            return row.missing or f"{Metric(metric).label} was not read"
    return ""


TRAINING_NEEDED = (
    Metric.TRAINING_PENDING_JOBS,
    Metric.TRAINING_PENDING_NODES,
    Metric.TRAINING_PENDING_GPUS,
    Metric.TRAINING_LONGEST_WAIT_S,
)


def _training(rows, at, errors) -> tuple[rules.TrainingQueue, ...] | None:
    scopes = _by_scope(rows, (*TRAINING_NEEDED, Metric.TRAINING_EXPECTED_START_S))
    if not scopes:
        errors[rules.Signal.TRAINING] = "the training queue was not read"
        return None
    queues = []
    for partition, figures in sorted(scopes.items()):
        why = _first_missing(figures, TRAINING_NEEDED)
        if why:
            errors[rules.Signal.TRAINING] = why
            return None
        start = figures.get(Metric.TRAINING_EXPECTED_START_S)
        queues.append(
            rules.TrainingQueue(
                partition=partition,
                pending_jobs=int(figures[Metric.TRAINING_PENDING_JOBS].value),
                pending_nodes=int(figures[Metric.TRAINING_PENDING_NODES].value),
                pending_gpus=int(figures[Metric.TRAINING_PENDING_GPUS].value),
                longest_wait_s=float(figures[Metric.TRAINING_LONGEST_WAIT_S].value),
                at=at,
                expected_start=(
                    at + timedelta(seconds=start.value)
                    if start is not None and start.value is not None
                    else None
                ),
            )
        )
    return tuple(queues)


INFERENCE_QUEUE_NEEDED = (
    Metric.INFERENCE_PENDING_JOBS,
    Metric.INFERENCE_PENDING_NODES,
    Metric.INFERENCE_ALLOCATED_NODES,
)


def _inference_queue(rows, at, policy, errors) -> rules.InferenceQueue | None:
    scopes = _by_scope(rows, INFERENCE_QUEUE_NEEDED)
    if not scopes:
        errors[rules.Signal.INFERENCE_QUEUE] = "the inference partition's queue was not read"
        return None
    totals = dict.fromkeys(INFERENCE_QUEUE_NEEDED, 0)
    for figures in scopes.values():
        why = _first_missing(figures, INFERENCE_QUEUE_NEEDED)
        if why:
            errors[rules.Signal.INFERENCE_QUEUE] = why
            return None
        for metric in INFERENCE_QUEUE_NEEDED:
            totals[metric] += int(figures[metric].value)
    return rules.InferenceQueue(
        partition=",".join(sorted(scopes)),
        pending_jobs=totals[Metric.INFERENCE_PENDING_JOBS],
        pending_nodes=totals[Metric.INFERENCE_PENDING_NODES],
        allocated_nodes=totals[Metric.INFERENCE_ALLOCATED_NODES],
        at=at,
    )


def _kubernetes(rows, at, errors) -> rules.KubernetesDemand | None:
    figures = _by_scope(rows, (Metric.K8S_PENDING_PODS, *K8S_REPLICAS)).get("", {})
    pods = figures.get(Metric.K8S_PENDING_PODS)
    if pods is None:
        return None  # no Kubernetes workload configured: not a signal of this cluster
    if pods.value is None:
        errors[rules.Signal.KUBERNETES] = pods.missing or "the Kubernetes pods were not read"
        return None
    desired, current = (figures.get(metric) for metric in K8S_REPLICAS)
    return rules.KubernetesDemand(
        desired_replicas=int(desired.value) if desired and desired.value is not None else 0,
        current_replicas=int(current.value) if current and current.value is not None else 0,
        pending_pods=int(pods.value),
        at=at,
    )


K8S_REPLICAS = (Metric.K8S_DESIRED_REPLICAS, Metric.K8S_CURRENT_REPLICAS)


def _inference_load(policy, now, rows, errors) -> tuple[rules.Sample, ...] | None:
    """The load's samples over the hysteresis (and a staleness' worth more), oldest first,
    or None when the newest pass could not read it or reads it in another unit."""
    latest = next((row for row in rows if row.metric == Metric.INFERENCE_LOAD), None)
    if latest is None or latest.value is None:
        why = latest.missing if latest is not None else "the inference load was not read"
        errors[rules.Signal.INFERENCE_LOAD] = why or "the inference load was not read"
        return None
    if latest.unit and latest.unit != policy.inference_unit:
        errors[rules.Signal.INFERENCE_LOAD] = (
            f"the inference load is measured as {latest.unit} but the policy's target is "
            f"in {policy.inference_unit}"
        )
        return None
    since = now - timedelta(seconds=policy.hysteresis_s + policy.stale_after_s)
    series = DemandSample.objects.filter(
        cluster_id=policy.cluster_id,
        metric=Metric.INFERENCE_LOAD,
        sampled_at__gte=min(since, latest.sampled_at),
        sampled_at__lte=latest.sampled_at,
        value__isnull=False,
    ).order_by("sampled_at", "id")
    return tuple(rules.Sample(value=row.value, at=row.sampled_at) for row in series)


# ------------------------------------------------------------------ the nodes
def nodes_for(policy: ReallocationPolicy) -> list[rules.NodeState]:
    """The pair's nodes as the decision needs them: busy, held by whom, checkpointable,
    when their jobs end, when they last moved, and any move already under way."""
    nodes = list(
        Node.objects.filter(pool_id__in=(policy.training_pool_id, policy.inference_pool_id))
        .select_related("pool")
        .order_by("name")
    )
    ids = [node.pk for node in nodes]
    active = {
        run.node_id: run
        for run in Remediation.objects.filter(node_id__in=ids, status__in=[str(s) for s in ACTIVE])
    }
    moved = _last_moved(ids)
    jobs = _running_jobs(ids)
    states = []
    for node in nodes:
        run = active.get(node.pk)
        mine = jobs.get(node.pk, [])
        states.append(
            rules.NodeState(
                name=node.name,
                pool=_pool(node.pool.kind),
                busy=node.state in BUSY_STATES or bool(mine),
                held_by=_held_by(node, run),
                checkpointable=bool(mine) and all(job["checkpointable"] for job in mine),
                jobs_end_by=max((j["ends"] for j in mine if j["ends"]), default=None),
                last_moved_at=moved.get(node.pk),
                moving_to=_pool(POOL_FOR_MOVE[run.action]) if run and run.action in MOVES else None,
            )
        )
    return states


POOL_FOR_MOVE = {Action.TO_INFERENCE: PoolKind.INFERENCE, Action.TO_TRAINING: PoolKind.TRAINING}


def _pool(kind: str) -> rules.Pool:
    return rules.Pool.INFERENCE if kind == PoolKind.INFERENCE else rules.Pool.TRAINING


def _held_by(node: Node, run: Remediation | None) -> str:
    """Who else holds the node, in words: another party's drain or cordon, a repair,
    Slurm taking it down, or another Medbay run (a repair is never interrupted by a move)."""
    if node.held_by or node.fleet_held_by:
        return " and ".join(filter(None, (node.held_by, node.fleet_held_by)))
    if node.in_repair_since or node.status in OUT_OF_SERVICE:
        return f"{node.status} in Slurm" if node.status != NodeStatus.IN_REPAIR else "in repair"
    if run is not None and run.action not in MOVES:
        return f"Medbay's run {run.pk} ({run.get_action_display().lower()})"
    return ""


def _last_moved(node_ids: list[int]) -> dict[int, datetime]:
    """When each node last finished a move, or had a proposed move rejected (an admin's
    no keeps it put for the cooldown, instead of being asked again every pass)."""
    runs = Remediation.objects.filter(node_id__in=node_ids, action__in=MOVES).filter(
        status__in=[RunStatus.SUCCEEDED, RunStatus.REJECTED]
    )
    found: dict[int, datetime] = {}
    for node_id, finished, decided in runs.values_list("node_id", "finished_at", "decided_at"):
        at = finished or decided
        if at and (node_id not in found or at > found[node_id]):
            found[node_id] = at
    return found


def _running_jobs(node_ids: list[int]) -> dict[int, list[dict]]:
    running = list(
        Job.objects.filter(nodes__in=node_ids, state=JobState.RUNNING)
        .values("pk", "requeue", "start_at", "time_limit_minutes", "nodes")
        .order_by()
    )
    saved = last_checkpoints(list({row["pk"] for row in running}))
    jobs: dict[int, list[dict]] = defaultdict(list)
    for row in running:
        ends = None
        if row["start_at"] and row["time_limit_minutes"]:
            ends = row["start_at"] + timedelta(minutes=row["time_limit_minutes"])
        # Checkpointable: Slurm may requeue it and it has saved a checkpoint to resume from.
        checkpointable = bool(row["requeue"]) and row["pk"] in saved
        jobs[row["nodes"]].append({"ends": ends, "checkpointable": checkpointable})
    return jobs


# ------------------------------------------------------------------ the recent moves
def recent_moves(policy: ReallocationPolicy, now: datetime) -> list[rules.RecentMove]:
    """The policy's own moves of the last day (those an admin turned down count against
    the hourly cap too: each was a proposal the policy made)."""
    runs = Remediation.objects.filter(
        trigger=Trigger.DEMAND,
        action__in=MOVES,
        node__cluster_id=policy.cluster_id,
        created_at__gt=now - RECENT_MOVES,
        created_at__lte=now,
    ).values_list("node__name", "action", "created_at", "status", "finished_at")
    return [
        rules.RecentMove(
            node=name,
            direction=DIRECTION[action],
            at=created,
            done_at=finished if status == RunStatus.SUCCEEDED else None,
        )
        for name, action, created, status, finished in runs
    ]
