"""Creating remediation runs and moving them between statuses.

The engine, the policies and the admin actions all go through these two
functions, so a run can only be created under the database's one-active-run-per-
node constraint and only moved along the transition table, each move with its
history row and its live update sent after commit.
"""

from __future__ import annotations

import logging

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

__all__ = ["IllegalTransition", "NodeBusy", "create_run", "slurm_reason", "transition"]

REASON_LIMIT = 255
MESSAGE_LIMIT = 500

# The run lists and the approval queue: every page that lists runs.
RUNS_REGION = "runs"


class NodeBusy(Exception):
    """The node already has an active run; a node is healed by one run at a time."""

    def __init__(self, existing: Remediation | None):
        where = f"run {existing.pk} ({existing.action}, {existing.status})" if existing else "a run"
        super().__init__(f"The node already has an active remediation: {where}.")
        self.existing = existing


def slurm_reason(run: Remediation, text: str | None = None) -> str:
    """The reason Slurm shows, e.g. `medbay: XID 79 GPU 3 fallen off the bus [run 42]`."""
    return f"medbay: {text if text is not None else run.reason} [run {run.pk}]"


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
            _record(run, "", status, f"{mode.label} run requested", actor or _actor(run), now)
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
    new = RunStatus(new_status)
    now = timezone.now()
    values = {"status": new, "updated_at": now, **fields}
    if message:
        values["message"] = message[:MESSAGE_LIMIT]
    if new in TERMINAL:
        values.update(finished_at=now, claimed_by="", claimed_until=None)
    with transaction.atomic():
        candidates = Remediation.objects.filter(pk=run.pk, status=previous)
        changed = candidates.filter(**(guard or {})).update(**values)
        if not changed:
            return False
        for name, value in values.items():
            setattr(run, name, value)
        _record(run, previous, new, message, actor or "engine", now)
        if new == RunStatus.RUNNING:
            _mark_node(run, active=True)
        elif new in TERMINAL:
            _mark_node(run, active=False)
    _publish_after_commit(run)
    return True


def publish_step(step: RemediationStep) -> None:
    """The run's page and the pages of the jobs it acted on show the step once committed."""
    run_id = step.remediation_id
    transaction.on_commit(lambda: live.poke(live.REMEDIATION_GROUP, [f"run-{run_id}"]))
    transaction.on_commit(lambda: live.gather(_poke_pages_of_touched_jobs, [run_id]))


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
    transaction.on_commit(lambda: live.poke(live.REMEDIATION_GROUP, regions))
    transaction.on_commit(lambda: live.poke_node_pages([node_name]))
    transaction.on_commit(lambda: live.gather(_poke_pages_of_touched_jobs, [run.pk]))
