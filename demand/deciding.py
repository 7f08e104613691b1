"""The decision pass: each enabled policy's verdict, and the runs that carry it out.

For each enabled reallocation policy of a cluster: the snapshot of the latest sample
pass, the pair's nodes and the policy's recent moves go to `demand.rules.decide`, and
each move it returns becomes a to_inference or to_training run with trigger `demand`,
through the same engine as every other run: created by `remediation.services` (one
active run per node), asking the circuit breaker first when it moves automatically,
waiting in the approval queue otherwise, with the evidence in its context for the
approval card and the run page. A node whose jobs are checkpoint-requeued by policy
gets the plan that signals them and waits their grace first.

The pass holds the cluster's row lock, as the health admission does: two processes
deciding at once (the sync and the demo, two syncs) must not both move the same demand.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from clusters.models import Cluster, Node, Partition
from demand import rules, snapshots
from demand.models import DecisionOutcome, DemandDecision, PolicyMode, ReallocationPolicy
from demand.policies import as_rules
from remediation import actions, safety, services
from remediation.models import Action, Mode, Remediation, Trigger
from remediation.plans import plan_for

logger = logging.getLogger(__name__)

ACTION_FOR = {
    rules.Direction.TO_INFERENCE: Action.TO_INFERENCE,
    rules.Direction.TO_TRAINING: Action.TO_TRAINING,
}
# A node whose checkpointable jobs the policy requeues: signalled, given their grace,
# requeued, then the move's own plan (its wait_drained finds the node empty).
REQUEUE_FIRST = ("drain", "signal_jobs", "wait_grace", "requeue_jobs")
ACTOR = "demand policy"
REASON_LIMIT = 200


def decide_cluster(cluster: Cluster, *, now: datetime | None = None) -> list[DemandDecision]:
    """Decide every enabled policy of the cluster; returns the decisions recorded."""
    now = now or timezone.now()
    recorded = []
    for policy in ReallocationPolicy.objects.filter(cluster=cluster, enabled=True).select_related(
        "cluster", "training_pool", "inference_pool"
    ):
        try:
            row = decide_policy(policy, now=now)
        except Exception:  # one policy's failure must leave the others deciding
            logger.exception("Demand decision for policy %s failed", policy.pk)
            continue
        if row is not None:
            recorded.append(row)
    return recorded


def decide_policy(policy: ReallocationPolicy, *, now: datetime) -> DemandDecision | None:
    """One pass of one policy: its verdict, the runs it starts, and the record of both.
    Returns the new DemandDecision row, or None when the verdict repeats the last one."""
    with transaction.atomic():
        Cluster.objects.select_for_update().filter(pk=policy.cluster_id).first()
        decision = rules.decide(
            as_rules(policy),
            snapshots.snapshot_for(policy, now),
            snapshots.nodes_for(policy),
            snapshots.recent_moves(policy, now),
            now,
        )
        results, runs = _start_moves(policy, decision, now) if decision.moves else ({}, [])
        return _record(policy, decision, results, runs, now)


def _start_moves(policy, decision: rules.Decision, now) -> tuple[dict[str, str], list[int]]:
    """A run per move, or why none: {node: "run 12" or the refusal}, and the runs' ids."""
    names = [move.node for move in decision.moves]
    nodes = {
        node.name: node
        for node in Node.objects.filter(cluster_id=policy.cluster_id, name__in=names)
        .select_related("pool", "cluster")
    }  # fmt: skip
    ledger = safety.BreakerLedger(policy.cluster_id, [node.pk for node in nodes.values()])
    results, runs = {}, []
    for move in decision.moves:
        node = nodes.get(move.node)
        if node is None:
            results[move.node] = "no longer known"
            continue
        outcome = _start_move(policy, decision, move, node, ledger, now)
        if isinstance(outcome, Remediation):
            runs.append(outcome.pk)
            results[move.node] = f"run {outcome.pk}"
        else:
            results[move.node] = outcome
    ledger.flush()
    return results, runs


def _start_move(policy, decision, move: rules.Move, node: Node, ledger, now):
    """The move's run, or why it was not started."""
    action = ACTION_FOR[move.direction]
    problem = actions.refusal(node, action)
    if problem:
        return problem
    automatic = policy.mode == PolicyMode.AUTOMATIC
    if automatic:
        refused = ledger.admit(node, action=action)
        if refused:
            return f"circuit breaker open: {refused}"
    steps = plan_for(action)
    context = {"demand": evidence_context(policy, decision, move, now)}
    if move.requeue:
        steps = [*REQUEUE_FIRST, *steps[1:]]
        context["grace_s"] = _grace_for(node)
    try:
        run = services.create_run(
            node,
            action,
            trigger=Trigger.DEMAND,
            reason=decision.reason[:REASON_LIMIT],
            mode=Mode.AUTOMATIC if automatic else Mode.APPROVAL,
            context=context,
            steps=steps,
            actor=ACTOR,
        )
    except services.NodeBusy as busy:
        return str(busy)
    ledger.added(run)
    return run


def evidence_context(policy, decision: rules.Decision, move: rules.Move, now) -> dict:
    """What a run records of the decision that started it: the policy, the rule that
    fired, the sentence, the figures and thresholds, and how its node moves."""
    return {
        "policy": policy.pk,
        "rule": str(decision.rule),
        "sentence": decision.reason,
        "evidence": decision.evidence,
        "decided_at": now.isoformat(),
        "waits_for_jobs": move.waits_for_jobs,
        "requeue": move.requeue,
    }


def _grace_for(node: Node) -> int:
    names = [name for name in node.partition_names.split(",") if name]
    graces = Partition.objects.filter(cluster_id=node.cluster_id, name__in=names)
    found = graces.aggregate(grace=Max("checkpoint_grace_s"))["grace"]
    return int(found if found is not None else actions.DEFAULT_GRACE_S)


def _outcome(policy, decision: rules.Decision, runs: list[int]) -> str:
    if not decision.moves:
        return DecisionOutcome.HELD
    if not runs:
        return DecisionOutcome.REFUSED
    automatic = policy.mode == PolicyMode.AUTOMATIC
    return DecisionOutcome.MOVED if automatic else DecisionOutcome.PROPOSED


def _record(policy, decision, results, runs, now) -> DemandDecision | None:
    """The policy's latest verdict (always), and a history row when it started runs or
    concludes otherwise than the last row did: a steady hold is one row, not one a pass."""
    outcome = _outcome(policy, decision, runs)
    sentence = decision.reason[:500]
    if results:
        sentence = (sentence + " — " + _results_words(results))[:500]
    ReallocationPolicy.objects.filter(pk=policy.pk).update(
        checked_at=now, checked_rule=str(decision.rule), checked_sentence=sentence
    )
    policy.checked_at, policy.checked_rule, policy.checked_sentence = now, decision.rule, sentence
    last = DemandDecision.objects.filter(policy=policy).order_by("-at", "-id").first()
    if not runs and last is not None and (last.outcome, last.rule) == (outcome, decision.rule):
        return None
    return DemandDecision.objects.create(
        policy=policy,
        at=now,
        outcome=outcome,
        rule=str(decision.rule),
        sentence=sentence,
        evidence=decision.evidence,
        runs=runs,
        moves=results,
    )


def _results_words(results: dict[str, str]) -> str:
    return "; ".join(f"{node}: {what}" for node, what in results.items())
