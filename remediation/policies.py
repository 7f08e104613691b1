"""What the engine does about a fault: the catalogue's rung, unless a Policy row says otherwise.

`on_reported` is the trigger: health ingestion calls it after commit with the
incidents a batch opened or grew, and it creates at most one run per incident
and per node, behind the circuit breaker, deciding a storm's incidents many at a
time; `on_incidents` decides given incidents at once. `replay` runs the same decisions
over past incidents without touching anything.
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import reduce
from operator import or_

from django.db import transaction
from django.db.models import Exists, JSONField, OuterRef, Q, Subquery
from django.utils import timezone

from agent import xid as catalogue
from clusters.models import Cluster
from core import live
from health.models import CheckStatus, EventKind, FaultGroup, FaultGroupKind, HealthEvent, Incident
from remediation import correlation, safety, services
from remediation.models import (
    Action,
    Mode,
    Policy,
    Remediation,
    RemediationStatusChange,
    Trigger,
)
from remediation.services import NodeBusy, create_run
from remediation.transitions import ACTIVE, RunStatus

logger = logging.getLogger(__name__)

RUNG_ACTIONS: dict[catalogue.Rung, str | None] = {
    catalogue.Rung.IGNORE: None,
    catalogue.Rung.NOTIFY: Action.NOTIFY,
    catalogue.Rung.RESTART_APP: Action.RESTART_APP,
    catalogue.Rung.RESET_GPU: Action.RESET_GPU,
    catalogue.Rung.REBOOT: Action.REBOOT,
    catalogue.Rung.REPLACE: Action.REPLACE,
}
# The catalogue says "restart the node" for XID 79, but the product's automatic
# recovery plan replaces a node whose GPU fell off the bus, without waiting for
# an admin: the GPU rarely comes back healthy and the job should not wait on it.
PRODUCT_DEFAULTS: dict[int, tuple[str, str]] = {79: (Action.REPLACE, Mode.AUTOMATIC)}
# Without a policy row, anything that interrupts jobs waits for an admin.
HARMLESS = (None, Action.NOTIFY)
REPEAT_WINDOW = timedelta(hours=24)


@dataclass(frozen=True)
class Decision:
    """What the policies say about one incident, and (when acted on) what happened."""

    node: str
    incident_id: int | None
    at: datetime | None
    xid: int | None
    action: str | None
    mode: str
    reason: str
    policy_id: int | None = None
    gpu: int | None = None
    outcome: str = ""

    def but(self, outcome: str) -> Decision:
        return replace(self, outcome=outcome)


def default_for_xid(xid: int, *, repeats: int = 1, with_codes=()) -> tuple[str | None, str]:
    if xid in PRODUCT_DEFAULTS:
        return PRODUCT_DEFAULTS[xid]
    rung = catalogue.escalate(xid, repeats=repeats, with_codes=with_codes)
    action = RUNG_ACTIONS[rung]
    return action, Mode.AUTOMATIC if action in HARMLESS else Mode.APPROVAL


def xid_reason(xid: int, gpu: int | None) -> str:
    """`XID 79 GPU 3 fallen off the bus`: what Slurm and the timeline show."""
    name = catalogue.lookup(xid).name
    for prefix in ("GPU has ", "GPU "):
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    where = f" GPU {gpu}" if gpu is not None else ""
    return f"XID {xid}{where} {name[:1].lower()}{name[1:]}"


def decide(incident: Incident, *, policies: dict | None = None) -> Decision:
    """The most drastic action any of the incident's XIDs (or failed checks) calls for."""
    policies = _policies() if policies is None else policies
    candidates = [_for_xid(incident, xid, policies) for xid in incident.xids or []]
    if not candidates:
        candidates = _for_checks(incident, policies)
    base = _no_action(incident, "nothing to do")
    # The most drastic action wins (one ranking, SEVERITY, for this and for escalation).
    return max([base, *candidates], key=lambda d: SEVERITY.get(d.action, 0))


def _for_xid(incident: Incident, xid: int, policies: dict) -> Decision:
    policy = policies.get(("xid", xid))
    if policy is not None:
        action = policy.action if policy.enabled else None
        mode = policy.mode
    elif xid in PRODUCT_DEFAULTS:  # decided without counting repeats (a query per XID)
        action, mode = PRODUCT_DEFAULTS[xid]
    else:
        action, mode = default_for_xid(
            xid, repeats=_repeats(incident, xid), with_codes=incident.xids
        )
    return Decision(
        node=incident.node.name,
        incident_id=incident.pk,
        at=incident.opened_at,
        xid=xid,
        action=action,
        mode=mode,
        reason=xid_reason(xid, incident.gpu_index),
        policy_id=policy.pk if policy else None,
        gpu=incident.gpu_index,
    )


def _for_checks(incident: Incident, policies: dict) -> list[Decision]:
    names = HealthEvent.objects.filter(
        incident=incident, kind=EventKind.CHECK, status=CheckStatus.FAIL
    ).values_list("check_name", flat=True)
    decisions = []
    for name in sorted(set(names)):
        policy = policies.get(("check", name))
        action = (policy.action if policy.enabled else None) if policy else Action.NOTIFY
        decisions.append(
            Decision(
                node=incident.node.name,
                incident_id=incident.pk,
                at=incident.opened_at,
                xid=None,
                action=action,
                mode=policy.mode if policy else Mode.AUTOMATIC,
                reason=f"health check {name} failed",
                policy_id=policy.pk if policy else None,
                gpu=incident.gpu_index,
            )
        )
    return decisions


def _repeats(incident: Incident, xid: int) -> int:
    """Bursts of this XID on the same GPU in the last day, this one included."""
    since = incident.opened_at - REPEAT_WINDOW
    earlier = Incident.objects.filter(
        node_id=incident.node_id,
        gpu_index=incident.gpu_index,
        opened_at__gte=since,
        opened_at__lte=incident.opened_at,
    ).values_list("xids", flat=True)
    return max(1, sum(1 for xids in earlier if xid in (xids or [])))


def _policies() -> dict:
    policies = {}
    for policy in Policy.objects.all():
        if policy.xid is not None:
            policies[("xid", policy.xid)] = policy
        if policy.check_name:
            policies[("check", policy.check_name)] = policy
    return policies


# ----------------------------------------------------------------- the trigger
# One pass decides at most this many incidents; a process deciding for others goes on
# with new arrivals for no longer than this before it answers its own agent.
DECIDE_BATCH = 500
DECIDE_FOR_S = 2.0


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
        _decide(incident_ids, direct=False)
    except Exception:
        logger.exception("Remediation trigger for incidents %s failed", incident_ids)


def on_incidents(incident_ids: list[int]) -> list[Decision]:
    """Decide these incidents now, waiting for their clusters' locks: at most one run
    per incident and per node, behind the circuit breaker. Returns their decisions."""
    return _decide(incident_ids, direct=True)


def decide_due() -> int:
    """Decide the incidents still waiting in every cluster whose lock is free (a report
    that arrived just after the pass deciding for others last looked). Returns how many."""
    waiting = _not_backing_off(Incident.objects.filter(decision_due=True)).order_by()
    clusters = list(waiting.values_list("node__cluster_id", flat=True).distinct())
    if not clusters:
        return 0
    policies = _policies()
    return sum(_decide_in_cluster(cid, [], policies, direct=False)[1] for cid in clusters)


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


def _decide(incident_ids: list[int], *, direct: bool) -> list[Decision]:
    policies = _policies()
    if not direct:
        # A report's incidents go straight to their cluster's pass, handled or not.
        reported = Incident.objects.filter(pk__in=incident_ids).order_by()
        for cluster_id in reported.values_list("node__cluster_id", flat=True).distinct():
            _decide_in_cluster(cluster_id, incident_ids, policies, direct=False)
        return []
    incidents = list(_with_runs(Incident.objects.filter(pk__in=incident_ids)))
    handled = [incident for incident in incidents if incident.handled]
    decisions = _decide_each(handled, policies, _Batch(None, handled))
    _mark_decided(handled)
    fresh: dict[int, list[int]] = {}
    for incident in incidents:
        if not incident.handled:
            fresh.setdefault(incident.node.cluster_id, []).append(incident.pk)
    for cluster_id, mine in fresh.items():
        decisions += _decide_in_cluster(cluster_id, mine, policies, direct=True)[0]
    return decisions


def _decide_in_cluster(
    cluster_id: int, mine: list[int], policies: dict, *, direct: bool
) -> tuple[list[Decision], int]:
    """`mine` and the other incidents waiting in the cluster, under its lock, in passes
    of DECIDE_BATCH: (the decisions about `mine`, how many were decided in all).

    Direct: waits for the lock and decides `mine` whatever their flag says. Otherwise a
    taken lock means another process is deciding the cluster's waiting incidents, ours
    among them, and only those still waiting under the lock are decided. While others'
    incidents keep waiting (a storm), passes follow until DECIDE_FOR_S is spent.
    """
    wanted, decisions, decided = set(mine), [], 0
    deadline = time.monotonic() + DECIDE_FOR_S
    while True:
        taken: list[int] = []
        try:
            made, batch, others = _pass(cluster_id, mine, policies, direct=direct, taken=taken)
        except Exception as error:
            # The pass failed as a whole (at COMMIT, say): each of its incidents is
            # decided alone, so that the one that fails is isolated and the rest go on.
            logger.exception("Decision pass in cluster %s failed; deciding one by one", cluster_id)
            made, batch, others = _one_by_one(cluster_id, taken, policies, error), taken, []
        if batch is None:
            break
        decisions += [decision for decision in made if decision.incident_id in wanted]
        decided += len(batch)
        if not others or time.monotonic() > deadline:
            break
        mine, direct = [], False
    return decisions, decided


def _pass(cluster_id: int, mine: list[int], policies: dict, *, direct: bool, taken: list[int]):
    """One admission pass under the cluster's lock: (decisions, the batch or None when
    there was nothing to decide, the other waiting incidents it took). `taken` is filled
    with the batch's ids before deciding, for `_one_by_one` should the pass fail."""
    # The runs a pass starts publish after its commit: in one trip (live.one_trip).
    with live.one_trip(), transaction.atomic():
        # One admission pass at a time per cluster (PostgreSQL row lock), so that two
        # agents reporting at once cannot both slip under the breaker's limit.
        locked = Cluster.objects.select_for_update(skip_locked=not direct)
        if locked.filter(pk=cluster_id).first() is None:
            return [], None, []
        ours = Incident.objects.filter(pk__in=mine, node__cluster_id=cluster_id)
        if not direct:
            ours = _not_backing_off(ours.filter(decision_due=True))
        batch = list(_with_runs(ours))
        others = _waiting_in(cluster_id, mine)[: max(0, DECIDE_BATCH - len(batch))]
        if others:
            batch += list(_with_runs(Incident.objects.filter(pk__in=others)))
        if not batch:
            return [], None, []
        batch.sort(key=lambda incident: incident.pk)
        taken[:] = [incident.pk for incident in batch]
        pass_ = _Batch(cluster_id, batch)
        made = _decide_each(batch, policies, pass_)
        _mark_decided([i for i in batch if i.pk not in pass_.failed and i.pk not in pass_.held])
        for pk, until in pass_.held.items():
            # Not one that a later incident of the pass grouped: it is due at once.
            Incident.objects.filter(pk=pk, group__isnull=True).update(decide_after=until)
    _note_failures(pass_.failed)
    return made, batch, others


def _one_by_one(cluster_id: int, incident_ids: list[int], policies: dict, error) -> list:
    """After a failed pass: each incident in a pass of its own; one that fails alone too
    has its failure noted (retried with backoff, then shown as undecidable)."""
    decisions = []
    for pk in incident_ids:
        try:
            made, _, _ = _pass(cluster_id, [pk], policies, direct=True, taken=[])
            decisions += made
        except Exception as alone:
            logger.exception("Deciding incident %s failed", pk)
            _note_failures({pk: _error_text(alone)})
    return decisions


# A decision that raised is tried again after DECISION_BACKOFF_S, doubled each time;
# after MAX_DECISION_FAILURES the incident stops waiting and says why.
MAX_DECISION_FAILURES = 3
DECISION_BACKOFF_S = 5.0
UNDECIDABLE = "could not be decided: "


def undecidable():
    """Incidents whose decision kept failing, newest first: for the approval queue."""
    return Incident.objects.exclude(decision_error="").select_related("node").order_by("-pk")


def decide_again(incident: Incident) -> list[Decision]:
    """An admin's "try again" on an undecidable incident: its failures are forgotten and
    it is decided now (failing again, it is retried and shown again as before)."""
    Incident.objects.filter(pk=incident.pk).update(
        decision_due=True, decision_failures=0, decide_after=None, decision_error=""
    )
    return on_incidents([incident.pk])


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
    counts = dict(Incident.objects.filter(pk__in=failed).values_list("pk", "decision_failures"))
    for pk, error in failed.items():
        failures = counts.get(pk, 0) + 1
        if failures >= MAX_DECISION_FAILURES:
            fields = {"decision_due": False, "decide_after": None}
            fields["decision_error"] = f"{UNDECIDABLE}{error}"[:500]
        else:
            delay = DECISION_BACKOFF_S * 2 ** (failures - 1)
            fields = {"decide_after": now + timedelta(seconds=delay)}
        Incident.objects.filter(pk=pk).update(decision_failures=failures, **fields)
    live.poke(live.REMEDIATION_GROUP, [services.RUNS_REGION])  # the approval queue


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


def _decide_each(incidents: list[Incident], policies: dict, batch: _Batch) -> list[Decision]:
    decisions = []
    # In a pass's transaction a savepoint each, so that one incident's failure leaves
    # the others' decisions; outside one each write commits by itself.
    savepoint = transaction.get_connection().in_atomic_block
    for incident in incidents:
        if incident.handled and not _grew(incident):
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


def _mark_decided(incidents: list[Incident]) -> None:
    """Clear `decision_due` of the incidents decided, as they were read: one that grew
    since (its event count moved on) stays due and is decided again."""
    due = [incident for incident in incidents if incident.decision_due]
    for start in range(0, len(due), DECIDE_BATCH):
        chunk = due[start : start + DECIDE_BATCH]
        as_read = reduce(or_, (Q(pk=i.pk, event_count=i.event_count) for i in chunk))
        Incident.objects.filter(as_read).update(decision_due=False)


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


def _regrown(incident: Incident, policies: dict) -> Decision | None:
    """An incident its run already handles grew a new XID (a 48 after a 31 on the same
    GPU): decide again, and supersede the run when the new fault is more drastic."""
    if not _grew(incident):
        return None
    run = Remediation.objects.filter(pk=incident.active_run).first()
    if run is None:
        return None
    decision = decide(incident, policies=policies)
    if not supersedes(decision, run):
        return _join(incident, run, decision)
    with transaction.atomic():
        Cluster.objects.select_for_update().filter(pk=incident.node.cluster_id).first()
        batch = _Batch(incident.node.cluster_id, [incident])
        return _supersede(incident, incident.node, run, decision, batch)


def _grew(incident: Incident) -> bool:
    """Whether the incident's active run was decided on fewer XIDs than it now holds."""
    if incident.active_run is None:
        return False
    context = incident.active_context or {}
    if isinstance(context, str):  # SQLite hands the subquery's JSON back as text
        context = json.loads(context)
    decided = context.get("xids") or [context.get("xid")]
    return bool(set(incident.xids or []) - set(decided))


def _xids_of(run: Remediation) -> list:
    return run.context.get("xids") or [run.context.get("xid")]


def _already_handled(incident: Incident) -> Decision:
    return _no_action(incident, "a run already handles this incident", "already handled")


def _no_action(incident: Incident, reason: str, outcome: str = "") -> Decision:
    return Decision(
        node=incident.node.name,
        incident_id=incident.pk,
        at=incident.opened_at,
        xid=None,
        action=None,
        mode=Mode.AUTOMATIC,
        reason=reason,
        gpu=incident.gpu_index,
        outcome=outcome,
    )


def _handle(incident: Incident, policies: dict, batch: _Batch) -> Decision:
    """One incident without a run, decided under its cluster's lock."""
    verdict = correlation.correlate(incident, timezone.now())
    if verdict.group is not None and verdict.group.kind == FaultGroupKind.PART:
        return _drain_for_part(incident, verdict.group, batch)
    if verdict.group is not None:  # the job's own fault: no node is acted on
        group = verdict.group
        return _no_action(incident, group.summary, f"part of fault group {group.pk}")
    if verdict.hold_until is not None:
        batch.held[incident.pk] = verdict.hold_until
        return _no_action(incident, "held for the job's other nodes", "held")
    decision = decide(incident, policies=policies)
    if decision.action is None:
        return decision.but("nothing to do")
    node = incident.node
    busy = batch.active_run(node.pk)
    if busy is not None and not supersedes(decision, busy):
        return _join(incident, busy, decision)
    if busy is not None:
        return _supersede(incident, node, busy, decision, batch)
    return _admit(incident, node, decision, batch)


# ----------------------------------------------------------------- escalation
# How drastic each action is, for a fault that arrives while a run is active. Admin
# moves and uncordons rank lowest (a fault on a node being moved takes over), a
# plain drain sits between restarting jobs and resetting a GPU.
SEVERITY = {
    None: 0,
    Action.NOTIFY: 1,
    Action.UNCORDON: 2,
    Action.TO_INFERENCE: 2,
    Action.TO_TRAINING: 2,
    Action.RETURN_TO_SERVICE: 2,
    Action.RESTART_APP: 3,
    Action.CORDON: 4,
    Action.DRAIN: 4,
    Action.RESET_GPU: 5,
    Action.REBOOT: 6,
    Action.REPLACE: 7,
}


def supersedes(decision: Decision, run: Remediation) -> bool:
    """A more drastic action than the active run's takes over; a quarantine stays."""
    if run.planned_steps == ["quarantine"]:
        return False
    return SEVERITY.get(decision.action, 0) > SEVERITY.get(run.action, 0)


def _join(incident: Incident, run: Remediation, decision: Decision) -> Decision:
    """An equal or milder fault joins the active run: written on the run, not dropped."""
    joined = list(run.context.get("joined_incidents") or [])
    xids = sorted({*_xids_of(run), *(incident.xids or [])} - {None})
    if incident.pk not in joined or xids != sorted(set(_xids_of(run)) - {None}):
        if incident.pk not in joined and incident.pk != run.incident_id:
            joined.append(incident.pk)
        context = {**run.context, "joined_incidents": joined, "xids": xids}
        Remediation.objects.filter(pk=run.pk).update(context=context)
        run.context = context
        RemediationStatusChange.objects.create(
            remediation=run,
            from_status=run.status,
            to_status=run.status,
            message=f"joined by incident {incident.pk}: {decision.reason} "
            f"({decision.action}, not more drastic than {run.action})"[:500],
            actor="policy",
        )
    return decision.but(f"joined run {run.pk} ({run.get_action_display()}, {run.status})")


def _cancel_milder(old: Remediation, note: str) -> bool:
    """Cancel the milder run from the status it is in now, read again once if the engine
    moved it meanwhile (running -> waiting), so that its history says what happened."""
    if services.transition(old, RunStatus.CANCELLED, message=note, actor="policy"):
        return True
    old.refresh_from_db()
    return old.is_active and services.transition(
        old, RunStatus.CANCELLED, message=note, actor="policy"
    )


def _supersede(
    incident: Incident, node, old: Remediation, decision: Decision, batch: _Batch
) -> Decision:
    """Cancel the milder run and admit the new one in its place, or neither."""
    try:
        with transaction.atomic():
            note = f"superseded: {decision.reason} calls for {decision.action}"
            if not _cancel_milder(old, note):
                raise _Abandon(decision.but(f"node busy with run {old.pk} ({old.status})"))
            batch.ledger.forget()  # the cancelled run no longer counts
            outcome = _admit(incident, node, decision, batch, inherit=old)
            new_id = outcome.outcome.removeprefix("run ")
            if not new_id.isdigit():
                raise _Abandon(outcome)  # suppressed or refused: the milder run goes on
            pointer = f"superseded by run {new_id}: {decision.reason} calls for {decision.action}"
            Remediation.objects.filter(pk=old.pk).update(
                superseded_by_id=int(new_id), message=pointer
            )
            old.status_changes.filter(to_status=RunStatus.CANCELLED).update(message=pointer)
    except _Abandon as abandoned:
        batch.ledger.forget()  # the cancel was rolled back: the milder run counts again
        return abandoned.decision
    return outcome.but(f"run {new_id} (supersedes run {old.pk})")


class _Abandon(Exception):
    def __init__(self, decision: Decision):
        super().__init__(decision.outcome)
        self.decision = decision


def _admit(
    incident: Incident, node, decision: Decision, batch: _Batch, *, inherit=None
) -> Decision:
    mode = decision.mode
    acts = mode != Mode.DRY_RUN and decision.action not in HARMLESS
    flapping = acts and batch.faults(node.pk) >= safety.flap_threshold()
    automatic_drain = mode == Mode.AUTOMATIC and decision.action in safety.DRAINING_ACTIONS
    if automatic_drain or flapping:
        refused = batch.ledger.admit(node, incident=incident, action=decision.action or "")
        if refused:
            return decision.but(f"suppressed: circuit breaker open: {refused}")
    if flapping:
        return _quarantine(incident, node, decision, batch)
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
        return decision.but(f"node busy with run {busy.existing.pk if busy.existing else '?'}")
    batch.started(run)
    return decision.but(f"run {run.pk}")


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
        return _join(incident, busy, decision)
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
        return decision.but(
            f"node busy with run {busy_now.existing.pk if busy_now.existing else '?'}"
        )
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
        return decision.but(f"node busy with run {busy.existing.pk if busy.existing else '?'}")
    batch.started(run)
    return decision.but(f"quarantined by run {run.pk}")


def register() -> None:
    """Hook the trigger into health ingestion (called from the clusters app's ready())."""
    from health.ingest import incident_listeners

    if on_reported not in incident_listeners:
        incident_listeners.append(on_reported)


# ----------------------------------------------------------------- replay
def replay(start: datetime, end: datetime) -> list[Decision]:
    """What the current policies would have done about the incidents opened in
    [start, end): one decision per incident, nothing created or sent."""
    if start.tzinfo is None or end.tzinfo is None:
        raise ValueError("replay needs timezone-aware start and end")
    policies = _policies()
    incidents = (
        Incident.objects.filter(opened_at__gte=start, opened_at__lt=end)
        .select_related("node")
        .order_by("opened_at", "pk")
    )
    return [decide(incident, policies=policies) for incident in incidents]
