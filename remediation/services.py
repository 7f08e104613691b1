"""Creating remediation runs, moving them between statuses and writing their history.

The engine, the policies and the admin actions all go through these functions, so a
run can only be created under the database's one-active-run-per-node constraint and
only moved along the transition table, each move with its history row and its live
update sent after commit. History rows are only ever added here, never edited: a note
that changes no status (`note`) is a row of its own, and a run cancelled for a more
drastic one (`supersede`) gets its one cancel row once the new run exists, naming it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import IntegrityError, transaction
from django.utils import timezone

from clusters.live import publish_nodes
from clusters.models import Node
from core import live
from jobs.live import poke_job_pages
from remediation.models import (
    Mode,
    Remediation,
    RemediationJob,
    RemediationStatusChange,
    RemediationStep,
    Trigger,
    action_words,
    status_words,
)
from remediation.plans import plan_for
from remediation.transitions import (
    ACTIVE,
    TERMINAL,
    IllegalTransition,
    RunStatus,
    check_transition,
)

logger = logging.getLogger(__name__)

__all__ = [
    "IllegalTransition",
    "NodeBusy",
    "add_past_history",
    "create_run",
    "note",
    "slurm_reason",
    "supersede",
    "transition",
]

REASON_LIMIT = 255
MESSAGE_LIMIT = 500

# The run lists and the approval queue: every page that lists runs.
RUNS_REGION = "runs"


class NodeBusy(Exception):
    """The node already has an active run; a node is healed by one run at a time."""

    def __init__(self, existing: Remediation | None):
        where = (
            f"run {existing.pk} ({action_words(existing.action)}, {status_words(existing.status)})"
            if existing
            else "a run"
        )
        super().__init__(f"The node already has an active remediation: {where}.")
        self.existing = existing


def slurm_reason(run: Remediation, text: str | None = None) -> str:
    """The reason Slurm shows, e.g. `medbay: XID 79 GPU 3 fallen off the bus [run 42]`."""
    return f"medbay: {text if text is not None else run.reason} [run {run.pk}]"


def _requested(run: Remediation, mode: str) -> str:
    """The first line of a run's history: an admin's run was asked for, not automatic."""
    if run.trigger == Trigger.ADMIN:
        return "Requested by an admin" + (" (dry run)" if mode == Mode.DRY_RUN else "")
    if run.trigger == Trigger.SLURM:
        request = run.context.get("slurm_request") or {}
        return f"Requested in Slurm by {request.get('by') or 'someone'}: {run.reason}"
    return f"{Mode(mode).label} run requested"


def create_run(
    node: Node,
    action: str,
    *,
    trigger: str,
    reason: str,
    requested_by=None,
    incident=None,
    policy=None,
    mode: str = Mode.AUTOMATIC,
    context: dict | None = None,
    steps: list[str] | None = None,
    actor: str = "",
) -> Remediation:
    """A new run: RUNNING (automatic, dry run) or AWAITING_APPROVAL; NodeBusy if one is active."""
    mode = Mode(mode)
    status = RunStatus.AWAITING_APPROVAL if mode == Mode.APPROVAL else RunStatus.RUNNING
    now = timezone.now()
    run = Remediation(
        node=node,
        action=action,
        trigger=trigger,
        status=status,
        reason=" ".join(reason.split())[:REASON_LIMIT],
        dry_run=mode == Mode.DRY_RUN,
        planned_steps=list(steps) if steps is not None else plan_for(action),
        context=dict(context or {}),
        incident=incident,
        policy=policy,
        requested_by=requested_by,
        created_at=now,
        updated_at=now,
        due_at=now,
    )
    try:
        # A savepoint, so that losing the race leaves the caller's transaction usable.
        with transaction.atomic():
            run.save()
            _record(run, "", status, _requested(run, mode), actor or _actor(run), now)
            if status == RunStatus.RUNNING:
                _mark_node(run, active=True)
    except IntegrityError:
        existing = Remediation.objects.filter(node=node, status__in=list(ACTIVE)).first()
        raise NodeBusy(existing) from None
    _publish_after_commit(run)
    return run


def transition(
    run: Remediation,
    new_status: str,
    *,
    message: str = "",
    actor: str = "",
    guard: dict | None = None,
    **fields,
) -> bool:
    """Move `run` from the status it was read in to `new_status`.

    Illegal moves raise IllegalTransition. The UPDATE matches exactly the
    status that was read (and `guard`, e.g. the engine's lease), and the history
    row records that same status. Matching "any allowed source" instead would
    let an admin's cancel that raced the engine's running -> waiting succeed and
    record "running -> cancelled", a move that never happened. So of two
    workers (or an engine and an admin) racing, one wins and the other gets
    False: someone else changed the run, and the caller re-reads it before
    deciding anything.
    """
    previous = RunStatus(run.status)
    check_transition(previous, new_status)
    now = timezone.now()
    with transaction.atomic():
        if not _move(run, new_status, message, now, guard, fields):
            return False
        _record(run, previous, new_status, message, actor or "engine", now)
    _publish_after_commit(run)
    return True


def note(run: Remediation, message: str, *, actor: str, **fields) -> bool:
    """A history row that changes no status (an incident joined the run, say), with the
    run's `fields` (its context) updated in the same transaction.

    The row records the status it matched: read again once if the engine moved the run
    meanwhile. False (and nothing written) when the run moved twice under us.
    """
    for attempt in (1, 2):
        # No savepoint of its own: inside a decision pass the incident's savepoint holds.
        with transaction.atomic(savepoint=False):
            matched = Remediation.objects.filter(pk=run.pk, status=run.status)
            if not fields or matched.update(**fields):
                for name, value in fields.items():
                    setattr(run, name, value)
                _record(run, run.status, run.status, message, actor, timezone.now())
                return True
        if attempt == 1:
            run.refresh_from_db(fields=["status"])
    return False


def supersede(
    old: Remediation, start: Callable[[], Remediation | None], *, why: str, actor: str
) -> Remediation | None:
    """Cancel `old` and start the run that takes its place, in one transaction, or neither.

    The node holds one active run at a time, so `old` is cancelled before `start` creates
    its successor; the cancel's history row is written once the successor exists, naming
    it (`superseded by run N: why`), and `old.superseded_by` points at it. When `start`
    starts nothing (the breaker refused, the node was taken) the cancel is rolled back
    and the milder run goes on. None when nothing was started, `old.status` then being
    the status it was last read in.
    """
    now = timezone.now()
    with transaction.atomic():
        cancelled = _cancel_as_read(old, now)
        if cancelled is None:
            return None
        previous, read = cancelled
        new = start()
        if new is None:
            transaction.set_rollback(True)  # the cancel, and anything `start` wrote
            for name, value in read.items():
                setattr(old, name, value)
            return None
        message = f"superseded by run {new.pk}: {why}"[:MESSAGE_LIMIT]
        Remediation.objects.filter(pk=old.pk).update(superseded_by=new, message=message)
        old.superseded_by, old.message = new, message
        _record(old, previous, RunStatus.CANCELLED, message, actor, now)
    _publish_after_commit(old)
    return new


def add_past_history(changes: list[RemediationStatusChange], *, batch_size: int) -> None:
    """Append, in bulk, the history of runs that were never live (the demo's synthetic
    past): rows only ever added, as everywhere else."""
    RemediationStatusChange.objects.bulk_create(changes, batch_size=batch_size)


# What `_move` may change on a run in memory, for `supersede` to put back on a rollback.
_MOVED_FIELDS = ("status", "updated_at", "message", "finished_at", "claimed_by", "claimed_until")


def _cancel_as_read(run: Remediation, now) -> tuple[RunStatus, dict] | None:
    """Cancel `run` from the status it is in now, read again once if the engine moved it
    meanwhile (running -> waiting): (the status it was cancelled from, its fields as they
    were read), or None when it is no longer active."""
    for attempt in (1, 2):
        if attempt == 2:
            run.refresh_from_db()
            if not run.is_active:
                return None
        previous = RunStatus(run.status)
        read = {name: getattr(run, name) for name in _MOVED_FIELDS}
        check_transition(previous, RunStatus.CANCELLED)
        if _move(run, RunStatus.CANCELLED, "", now):
            return previous, read
    return None


def _move(run, new_status, message, now, guard=None, fields=None) -> bool:
    """The conditional UPDATE of a move the caller checked against the table, matching the
    status that was read (and `guard`), and what it means for the node. The caller holds
    the transaction and writes the history row."""
    previous = RunStatus(run.status)
    new = RunStatus(new_status)
    values = {"status": new, "updated_at": now, **(fields or {})}
    if message:
        values["message"] = message[:MESSAGE_LIMIT]
    if new in TERMINAL:
        values.update(finished_at=now, claimed_by="", claimed_until=None)
    candidates = Remediation.objects.filter(pk=run.pk, status=previous)
    if not candidates.filter(**(guard or {})).update(**values):
        return False
    for name, value in values.items():
        setattr(run, name, value)
    if new == RunStatus.RUNNING:
        _mark_node(run, active=True)
    elif new in TERMINAL:
        _mark_node(run, active=False)
    return True


def publish_step(step: RemediationStep) -> None:
    """The run's page and the pages of the jobs it acted on show the step once committed."""
    run_id = step.remediation_id
    transaction.on_commit(lambda: _poke_run_lists(run_id, [f"run-{run_id}"]))
    transaction.on_commit(lambda: live.gather(_poke_pages_of_touched_jobs, [run_id]))


def _poke_run_lists(run_id: int, regions: list[str]) -> None:
    """The run lists of all clusters and of the run's own cluster (one small query)."""
    cluster_ids = Remediation.objects.filter(pk=run_id).values_list("node__cluster_id", flat=True)
    groups = live.cluster_groups(live.REMEDIATION_GROUP, cluster_ids)
    live.poke_many((group, regions) for group in groups)


def _poke_pages_of_touched_jobs(run_ids: list[int]) -> None:
    """The open pages of the jobs these runs acted on show their new rows (one query for
    all the runs a decision pass or engine trip changed)."""
    # Two single-table reads, the second only for runs that touched a job: PostgreSQL
    # took longer to plan the three-table join than to run both.
    touched = RemediationJob.objects.filter(remediation_id__in=run_ids).values_list(
        "remediation_id", "slurm_job_id"
    )
    jobs_of: dict[int, set[int]] = {}
    for run_id, slurm_id in touched:
        jobs_of.setdefault(run_id, set()).add(slurm_id)
    if not jobs_of:
        return
    runs = Remediation.objects.filter(pk__in=jobs_of).values_list("pk", "node__cluster_id")
    by_cluster: dict[int, set[int]] = {}
    for run_id, cluster_id in runs:
        by_cluster.setdefault(cluster_id, set()).update(jobs_of[run_id])
    for cluster_id, slurm_ids in by_cluster.items():
        poke_job_pages(cluster_id, slurm_ids)


def _record(run, previous, new, message, actor, now) -> None:
    RemediationStatusChange.objects.create(
        remediation=run,
        from_status=previous,
        to_status=new,
        message=(message or "")[:MESSAGE_LIMIT],
        actor=actor[:128],
        at=now,
    )


def _actor(run: Remediation) -> str:
    return run.requested_by.get_username() if run.requested_by_id else "engine"


def _mark_node(run: Remediation, *, active: bool) -> None:
    # The board shows "replacing" from this field, since Slurm has no such state.
    value = run.action if active else ""
    updated = Node.objects.filter(pk=run.node_id).exclude(active_remediation=value)
    if updated.update(active_remediation=value):
        node_id = run.node_id
        transaction.on_commit(lambda: publish_nodes([node_id]))


def _publish_after_commit(run: Remediation) -> None:
    """Run lists, the approval queue, the run's page and its node's page follow its status."""
    regions, node_name = [RUNS_REGION, f"run-{run.pk}"], run.node.name
    cluster_id = run.node.cluster_id
    groups = live.cluster_groups(live.REMEDIATION_GROUP, [cluster_id])
    transaction.on_commit(lambda: live.poke_many((group, regions) for group in groups))
    transaction.on_commit(lambda: live.poke_node_pages([node_name], cluster_id))
    transaction.on_commit(lambda: live.gather(_poke_pages_of_touched_jobs, [run.pk]))
