"""Acting on decisions: at most one run per incident and per node, behind the breaker.

`on_reported` is the trigger: health ingestion calls it after commit with the incidents
a batch opened or grew. In a storm many agents report at once, so incidents are decided
many at a time, in passes under their cluster's lock, with one read of the breaker's
counts for a whole pass (`_sweep`); `on_incidents` decides given incidents at once,
waiting for the lock (`_decide_now`). A pass that fails as a whole is decided again one
incident at a time, and an incident whose decision keeps failing is set aside as
undecidable with its error. What a decision says is `deciding`'s; what happens when a
run is already active is `escalation`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from datetime import datetime, timedelta
from functools import reduce
from operator import or_

from django.db import transaction
from django.db.models import Exists, JSONField, OuterRef, Q, Subquery
from django.utils import timezone

from clusters.models import Cluster
from core import counters, live
from health.models import FaultGroup, FaultGroupKind, Incident
from jobs.models import JobState
from remediation import correlation, escalation, safety, services
from remediation.deciding import (
    HARMLESS,
    Decision,
    current_policies,
    decide,
    no_action,
    xid_reason,
)
from remediation.models import Action, Mode, Policy, Remediation, Trigger
from remediation.services import NodeBusy, create_run
from remediation.transitions import ACTIVE

logger = logging.getLogger(__name__)

# One pass decides at most this many incidents; a process deciding for others goes on
# with new arrivals for no longer than this before it answers its own agent.
DECIDE_BATCH = 500
DECIDE_FOR_S = 2.0

# A decision that raised is tried again after DECISION_BACKOFF_S, doubled each time;
# after MAX_DECISION_FAILURES the incident stops waiting and says why.
MAX_DECISION_FAILURES = 3
DECISION_BACKOFF_S = 5.0
UNDECIDABLE = "could not be decided: "
# The shared counter of decision passes that failed as a whole (`/metrics`).
FAILED_PASSES = "decision_passes_failed"


# ----------------------------------------------------------------- the entry points
def on_reported(incident_ids: list[int]) -> None:
    """Health ingestion's listener: act on new or grown incidents per policy.

    Runs after the ingest has committed, in the agent's request. In a storm many agents
    report at once: the request that takes the cluster's lock decides every incident
    waiting in that cluster (`Incident.decision_due`) in one pass, with one read of the
    breaker's counts for all of them; a request that finds the lock taken leaves its
    incidents to that pass and answers its agent at once (the engine's workers sweep up
    any that arrive just as the pass ends: `decide_due`). A failure here is logged,
    never turned into an error for an agent whose events are stored.
    """
    try:
        policies = current_policies()
        # A report's incidents go straight to their cluster's pass, handled or not.
        reported = Incident.objects.filter(pk__in=incident_ids).order_by()
        for cluster_id in reported.values_list("node__cluster_id", flat=True).distinct():
            _sweep(cluster_id, incident_ids, policies)
    except Exception:
        logger.exception("Remediation trigger for incidents %s failed", incident_ids)


def on_incidents(incident_ids: list[int]) -> list[Decision]:
    """Decide these incidents now, waiting for their clusters' locks: at most one run
    per incident and per node, behind the circuit breaker. Returns their decisions."""
    policies = current_policies()
    incidents = list(_with_runs(Incident.objects.filter(pk__in=incident_ids)))
    handled = [incident for incident in incidents if incident.handled]
    decisions = _decide_each(handled, policies, _Batch(None, handled))
    _mark_decided(handled)
    fresh: dict[int, list[int]] = {}
    for incident in incidents:
        if not incident.handled:
            fresh.setdefault(incident.node.cluster_id, []).append(incident.pk)
    for cluster_id, mine in fresh.items():
        decisions += _decide_now(cluster_id, mine, policies)
    return decisions


def decide_due() -> int:
    """Decide the incidents still waiting in every cluster whose lock is free (a report
    that arrived just after the pass deciding for others last looked). Returns how many."""
    waiting = _not_backing_off(Incident.objects.filter(decision_due=True)).order_by()
    clusters = list(waiting.values_list("node__cluster_id", flat=True).distinct())
    if not clusters:
        return 0
    policies = current_policies()
    return sum(_sweep(cluster_id, [], policies) for cluster_id in clusters)


def undecidable(cluster_id: int | None = None):
    """Incidents whose decision kept failing, newest first: for the approval queue (of
    one cluster, or of all with None)."""
    incidents = Incident.objects.exclude(decision_error="")
    if cluster_id is not None:
        incidents = incidents.filter(node__cluster_id=cluster_id)
    return incidents.select_related("node__cluster").order_by("-pk")


def decide_again(incident: Incident) -> list[Decision]:
    """An admin's "try again" on an undecidable incident: its failures are forgotten and
    it is decided now (failing again, it is retried and shown again as before)."""
    Incident.objects.filter(pk=incident.pk).update(
        decision_due=True, decision_failures=0, decide_after=None, decision_error=""
    )
    return on_incidents([incident.pk])


def register() -> None:
    """Hook the trigger into health ingestion (called from the clusters app's ready())."""
    from health.ingest import incident_listeners

    if on_reported not in incident_listeners:
        incident_listeners.append(on_reported)


# ----------------------------------------------------------------- passes under the lock
# A pass: (its decisions, the incidents it decided or None when there was nothing to
# decide, the other waiting incidents it took).
Pass = tuple[list[Decision], list[Incident] | None, list[int]]


def _decide_now(cluster_id: int, mine: list[int], policies: dict) -> list[Decision]:
    """Wait for the cluster's lock and decide `mine` whatever their flags say, with
    others' waiting incidents beside them; while others keep waiting (a storm), go on
    as a sweep. Returns the decisions about `mine`."""
    first = lambda taken: _pass_now(cluster_id, mine, policies, taken)  # noqa: E731
    return _passes(cluster_id, first, set(mine), policies)[0]


def _sweep(cluster_id: int, mine: list[int], policies: dict) -> int:
    """Decide the cluster's waiting incidents, those of `mine` still waiting among them,
    unless another process holds the lock: that process is deciding them, ours among
    them. Returns how many were decided."""
    first = lambda taken: _pass_due(cluster_id, mine, policies, taken)  # noqa: E731
    return _passes(cluster_id, first, set(), policies)[1]


def _passes(
    cluster_id: int, first: Callable[[list[int]], Pass], wanted: set[int], policies: dict
) -> tuple[list[Decision], int]:
    """`first`, then sweeps while others' incidents keep waiting, in passes of
    DECIDE_BATCH until DECIDE_FOR_S is spent: (the decisions about `wanted`, how many
    were decided in all)."""
    decisions, decided = [], 0
    deadline = time.monotonic() + DECIDE_FOR_S
    one_pass = first
    while True:
        taken: list[int] = []
        try:
            made, batch, others = one_pass(taken)
        except Exception as error:
            # The pass failed as a whole (at COMMIT, say): each of its incidents is
            # decided alone, so that the one that fails is isolated and the rest go on.
            logger.exception("Decision pass in cluster %s failed; deciding one by one", cluster_id)
            counters.add(FAILED_PASSES)
            made, batch, others = _one_by_one(cluster_id, taken, policies, error), taken, []
        if batch is None:
            break
        decisions += [decision for decision in made if decision.incident_id in wanted]
        decided += len(batch)
        if not others or time.monotonic() > deadline:
            break
        one_pass = lambda taken: _pass_due(cluster_id, [], policies, taken)  # noqa: E731
    return decisions, decided


def _pass_now(cluster_id: int, mine: list[int], policies: dict, taken: list[int]) -> Pass:
    """A pass that waits for the cluster's lock and decides `mine` whatever their flags."""
    with live.one_trip(), transaction.atomic():
        if Cluster.objects.select_for_update().filter(pk=cluster_id).first() is None:
            return [], None, []
        ours = Incident.objects.filter(pk__in=mine, node__cluster_id=cluster_id)
        made, batch, others, failed = _decide_locked(cluster_id, ours, mine, policies, taken)
    _note_failures(failed)
    return made, batch, others


def _pass_due(cluster_id: int, mine: list[int], policies: dict, taken: list[int]) -> Pass:
    """A pass that skips a cluster whose lock is taken, and decides only those of `mine`
    still waiting (another pass may have decided them meanwhile)."""
    with live.one_trip(), transaction.atomic():
        locked = Cluster.objects.select_for_update(skip_locked=True)
        if locked.filter(pk=cluster_id).first() is None:
            return [], None, []
        ours = Incident.objects.filter(pk__in=mine, node__cluster_id=cluster_id)
        ours = _not_backing_off(ours.filter(decision_due=True))
        made, batch, others, failed = _decide_locked(cluster_id, ours, mine, policies, taken)
    _note_failures(failed)
    return made, batch, others


def _decide_locked(cluster_id: int, ours, mine: list[int], policies: dict, taken: list[int]):
    """Under the cluster's lock (PostgreSQL row lock: one admission pass at a time per
    cluster, so that two agents reporting at once cannot both slip under the breaker's
    limit): `ours` and up to DECIDE_BATCH of the cluster's other waiting incidents.
    `taken` is filled with the batch's ids before deciding, for `_one_by_one` should the
    pass fail. The runs a pass starts publish after its commit, in one trip."""
    batch = list(_with_runs(ours))
    others = _waiting_in(cluster_id, mine)[: max(0, DECIDE_BATCH - len(batch))]
    if others:
        batch += list(_with_runs(Incident.objects.filter(pk__in=others)))
    if not batch:
        return [], None, [], {}
    batch.sort(key=lambda incident: incident.pk)
    taken[:] = [incident.pk for incident in batch]
    pass_ = _Batch(cluster_id, batch)
    made = _decide_each(batch, policies, pass_)
    _mark_decided([i for i in batch if i.pk not in pass_.failed and i.pk not in pass_.held])
    for pk, until in pass_.held.items():
        # Not one that a later incident of the pass grouped: it is due at once.
        Incident.objects.filter(pk=pk, group__isnull=True).update(decide_after=until)
    return made, batch, others, pass_.failed


def _one_by_one(cluster_id: int, incident_ids: list[int], policies: dict, error) -> list:
    """After a failed pass: each incident in a pass of its own; one that fails alone too
    has its failure noted (retried with backoff, then shown as undecidable)."""
    decisions = []
    for pk in incident_ids:
        try:
            made, _, _ = _pass_now(cluster_id, [pk], policies, taken=[])
            decisions += made
        except Exception as alone:
            logger.exception("Deciding incident %s failed", pk)
            _note_failures({pk: _error_text(alone)})
    return decisions


def _with_runs(incidents):
    # Whether a run already has each incident, in the same query: such an incident is
    # answered without deciding (and so without the repeat-count queries per XID).
    active = Remediation.objects.filter(
        incident=OuterRef("pk"), status__in=[str(s) for s in ACTIVE]
    )
    return incidents.select_related("node").annotate(
        handled=Exists(Remediation.objects.filter(incident=OuterRef("pk"))),
        active_run=Subquery(active.values("pk")[:1]),
        # The run's context says which XIDs it was decided on: only an incident
        # that grew a new one is decided again, without a query per incident.
        active_context=Subquery(active.values("context")[:1], output_field=JSONField()),
    )


def _waiting_in(cluster_id: int, mine: list[int]) -> list[int]:
    """Ids of the cluster's other incidents waiting for a decision, oldest first.

    Ids only: the query with the run annotations costs more to plan than to run. Every
    waiting incident is read (a partial index holds them) and the cluster's kept here:
    joined to the cluster's nodes in SQL, PostgreSQL planned from the nodes (12,500)
    whenever its statistics had not seen the cluster yet, 6 ms a pass.
    """
    waiting = _not_backing_off(Incident.objects.filter(decision_due=True))
    waiting = waiting.exclude(pk__in=mine).order_by("pk")
    return [
        pk for pk, cluster in waiting.values_list("pk", "node__cluster_id") if cluster == cluster_id
    ]


def _mark_decided(incidents: list[Incident]) -> None:
    """Clear `decision_due` of the incidents decided, as they were read: one that grew
    since (its event count moved on) stays due and is decided again."""
    due = [incident for incident in incidents if incident.decision_due]
    for start in range(0, len(due), DECIDE_BATCH):
        chunk = due[start : start + DECIDE_BATCH]
        as_read = reduce(or_, (Q(pk=i.pk, event_count=i.event_count) for i in chunk))
        Incident.objects.filter(as_read).update(decision_due=False)


# ----------------------------------------------------------------- failures
def _not_backing_off(incidents):
    return incidents.filter(Q(decide_after__isnull=True) | Q(decide_after__lte=timezone.now()))


def _error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".splitlines()[0][:400]


def _note_failures(failed: dict[int, str]) -> None:
    """Count a failed decision on each incident: due again after a backoff, or, after
    MAX_DECISION_FAILURES, no longer due and marked as undecidable with the error."""
    if not failed:
        return
    now = timezone.now()
    known = Incident.objects.filter(pk__in=failed)
    rows = list(known.values_list("pk", "decision_failures", "node__cluster_id"))
    counts = {pk: number for pk, number, _ in rows}
    clusters = {cluster_id for _, _, cluster_id in rows}
    for pk, error in failed.items():
        failures = counts.get(pk, 0) + 1
        if failures >= MAX_DECISION_FAILURES:
            fields = {"decision_due": False, "decide_after": None}
            fields["decision_error"] = f"{UNDECIDABLE}{error}"[:500]
        else:
            delay = DECISION_BACKOFF_S * 2 ** (failures - 1)
            fields = {"decide_after": now + timedelta(seconds=delay)}
        Incident.objects.filter(pk=pk).update(decision_failures=failures, **fields)
    # The approval queues of all clusters and of the incidents' own.
    groups = live.cluster_groups(live.REMEDIATION_GROUP, clusters)
    live.poke_many((group, [services.RUNS_REGION]) for group in groups)


# ----------------------------------------------------------------- one incident
class _Batch:
    """What deciding many incidents of one cluster reads once, not once per incident:
    which nodes have an active run, their recent faults, and the breaker's counts."""

    def __init__(self, cluster_id: int | None, incidents: list[Incident]):
        self.node_ids = {incident.node_id for incident in incidents}
        self.ledger = safety.BreakerLedger(cluster_id, self.node_ids)
        self.failed: dict[int, str] = {}  # incident id -> the error its decision raised
        # Incident id -> when to decide it: held while its job's other nodes may report.
        self.held: dict[int, datetime] = {}
        self._busy: dict[int, int] | None = None
        self._faults: dict[int, int] | None = None

    def active_run(self, node_id: int) -> Remediation | None:
        """The node's active run, read afresh (the engine may have moved it since the
        batch began); the nodes without one are known from a single query."""
        if self._busy is None:
            active = Remediation.objects.filter(
                node_id__in=self.node_ids, status__in=[str(s) for s in ACTIVE]
            )
            self._busy = dict(active.values_list("node_id", "pk"))
        pk = self._busy.get(node_id)
        return Remediation.objects.filter(pk=pk).select_related("node").first() if pk else None

    def faults(self, node_id: int) -> int:
        if self._faults is None:
            self._faults = safety.fault_counts(self.node_ids)
        return self._faults.get(node_id, 0)

    def started(self, run: Remediation) -> None:
        if self._busy is not None:
            self._busy[run.node_id] = run.pk
        self.ledger.added(run)


def _decide_each(incidents: list[Incident], policies: dict, batch: _Batch) -> list[Decision]:
    decisions = []
    # In a pass's transaction a savepoint each, so that one incident's failure leaves
    # the others' decisions; outside one each write commits by itself.
    savepoint = transaction.get_connection().in_atomic_block
    for incident in incidents:
        if incident.handled and not escalation.grew(incident):
            decisions.append(_already_handled(incident))
            continue
        mark = batch.ledger.mark()
        try:
            with transaction.atomic() if savepoint else nullcontext():
                if incident.handled:
                    decision = _regrown(incident, policies) or _already_handled(incident)
                else:
                    decision = _handle(incident, policies, batch)
            decisions.append(decision)
        except Exception as error:
            logger.exception("Remediation trigger for incident %s failed", incident.pk)
            batch.ledger.drop_since(mark)  # its refusals and trips were rolled back too
            batch.failed[incident.pk] = _error_text(error)
    batch.ledger.flush()
    return decisions


def _already_handled(incident: Incident) -> Decision:
    return no_action(incident, "a run already handles this incident", "already handled")


def _regrown(incident: Incident, policies: dict) -> Decision | None:
    """An incident its run already handles grew a new XID (a 48 after a 31 on the same
    GPU): decide again, and supersede the run when the new fault is more drastic."""
    if not escalation.grew(incident):
        return None
    run = Remediation.objects.filter(pk=incident.active_run).first()
    if run is None:
        return None
    decision = decide(incident, policies=policies)
    if not escalation.supersedes(decision, run):
        return escalation.join(incident, run, decision)
    with transaction.atomic():
        Cluster.objects.select_for_update().filter(pk=incident.node.cluster_id).first()
        batch = _Batch(incident.node.cluster_id, [incident])
        return _supersede(incident, run, decision, batch)


def _handle(incident: Incident, policies: dict, batch: _Batch) -> Decision:
    """One incident without a run, decided under its cluster's lock."""
    verdict = correlation.correlate(incident, timezone.now())
    if verdict.group is not None and verdict.group.kind == FaultGroupKind.PART:
        return _drain_for_part(incident, verdict.group, batch)
    if verdict.group is not None:  # the job's own fault: no node is acted on
        group = verdict.group
        return no_action(incident, group.summary, f"part of fault group {group.pk}")
    if verdict.hold_until is not None:
        batch.held[incident.pk] = verdict.hold_until
        return no_action(incident, "held for the job's other nodes", "held")
    decision = decide(incident, policies=policies)
    if decision.action is None:
        return decision.but("nothing to do")
    busy = batch.active_run(incident.node.pk)
    if busy is not None and not escalation.supersedes(decision, busy):
        return escalation.join(incident, busy, decision)
    if busy is not None:
        return _supersede(incident, busy, decision, batch)
    if decision.action == Action.RESTART_APP and not _has_running_jobs(incident.node):
        # Restarting jobs where none run would do nothing, yet ask an admin to approve it.
        return decision.but(f"nothing to do: no jobs running on {incident.node.name} to restart")
    return _admit(incident, incident.node, decision, batch)[0]


def _has_running_jobs(node) -> bool:
    return node.jobs.filter(state__in=(JobState.RUNNING, JobState.SUSPENDED)).exists()


def _supersede(incident: Incident, old: Remediation, decision: Decision, batch: _Batch) -> Decision:
    admit = lambda old: _admit(incident, incident.node, decision, batch, inherit=old)  # noqa: E731
    return escalation.supersede(old, decision, admit, batch.ledger)


def _admit(
    incident: Incident, node, decision: Decision, batch: _Batch, *, inherit=None
) -> tuple[Decision, Remediation | None]:
    """Start the decided run, asking the breaker first where it drains automatically or
    the node flaps: (the decision with its outcome, the run started for the decided
    action, or None when it was refused, the node was busy or a quarantine was started
    in its place)."""
    mode = decision.mode
    acts = mode != Mode.DRY_RUN and decision.action not in HARMLESS
    flapping = acts and batch.faults(node.pk) >= safety.flap_threshold()
    automatic_drain = mode == Mode.AUTOMATIC and decision.action in safety.DRAINING_ACTIONS
    if automatic_drain or flapping:
        refused = batch.ledger.admit(node, incident=incident, action=decision.action or "")
        if refused:
            return decision.but(f"suppressed: circuit breaker open: {refused}"), None
    if flapping:
        return _quarantine(incident, node, decision, batch), None
    try:
        run = create_run(
            node,
            decision.action,
            trigger=Trigger.HEALTH_EVENT,
            reason=decision.reason,
            incident=incident,
            policy=Policy.objects.filter(pk=decision.policy_id).first()
            if decision.policy_id
            else None,
            mode=mode,
            context=_context(incident, decision, inherit),
        )
    except NodeBusy as busy:
        return _busy(decision, busy), None
    batch.started(run)
    return decision.but(f"run {run.pk}"), run


def _busy(decision: Decision, busy: NodeBusy) -> Decision:
    return decision.but(f"node busy with run {busy.existing.pk if busy.existing else '?'}")


def _drain_for_part(incident: Incident, group: FaultGroup, batch: _Batch) -> Decision:
    """A node under a suspected shared part is drained, so that no new job lands on it,
    and nothing more: replacing it waits for an admin's decision on the part. The
    breaker is asked once for the whole part (it counts the part as one node)."""
    xid = next((code for code in incident.xids or [] if isinstance(code, int)), None)
    decision = Decision(
        node=incident.node.name,
        incident_id=incident.pk,
        at=incident.opened_at,
        xid=xid,
        action=Action.DRAIN,
        mode=Mode.AUTOMATIC,
        reason=f"{group.part} suspected: {xid_reason(xid, incident.gpu_index)}"[:255],
        gpu=incident.gpu_index,
    )
    node = incident.node
    busy = batch.active_run(node.pk)
    if busy is not None:
        return escalation.join(incident, busy, decision)
    if group.admitted is None:
        refused = batch.ledger.admit(node, incident=incident, action=Action.DRAIN)
        group.admitted = not refused
        FaultGroup.objects.filter(pk=group.pk).update(admitted=group.admitted)
    if not group.admitted:
        return decision.but(f"suppressed: circuit breaker open for {group.part}")
    context = {**_context(incident, decision, None), safety.PART_KEY: group.pk}
    try:
        run = create_run(
            node,
            Action.DRAIN,
            trigger=Trigger.HEALTH_EVENT,
            reason=decision.reason,
            incident=incident,
            mode=Mode.AUTOMATIC,
            context=context,
        )
    except NodeBusy as busy_now:
        return _busy(decision, busy_now)
    batch.started(run)
    return decision.but(f"run {run.pk} (part of {group.part})")


def _context(incident: Incident, decision: Decision, inherit: Remediation | None) -> dict:
    context = {"gpu": decision.gpu, "xid": decision.xid, "xids": list(incident.xids or [])}
    if inherit is not None:
        context["supersedes"] = inherit.pk
        if "held_by" in inherit.context:
            # Who held the node before Medbay's first drain, not Medbay's own reason.
            context["held_by"] = inherit.context["held_by"]
    return context


def _quarantine(incident: Incident, node, decision: Decision, batch: _Batch) -> Decision:
    faults = batch.faults(node.pk)
    try:
        run = create_run(
            node,
            Action.DRAIN,
            trigger=Trigger.HEALTH_EVENT,
            reason=f"quarantined, flapping: {faults} faults in {safety.flap_window_hours():g} h",
            incident=incident,
            mode=Mode.AUTOMATIC,
            context={"faults": faults, "gpu": decision.gpu, "xid": decision.xid},
            steps=["quarantine"],
        )
    except NodeBusy as busy:
        return _busy(decision, busy)
    batch.started(run)
    return decision.but(f"quarantined by run {run.pk}")
