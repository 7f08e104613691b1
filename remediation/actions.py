"""What admins do to remediation runs: request, approve, reject, cancel, preview.

Pages and the API parse and authorize input, then call one of these. Runs are
created and moved only through `services`, so the transition table and the
database's one-active-run-per-node constraint are never bypassed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from clusters import holders
from clusters.live import publish_nodes
from clusters.models import Gpu, GpuHealth, Node, NodeStateChange, NodeStatus, Partition, PoolKind
from clusters.status import POOL_FOR_PARTITION
from core.audited import save_audited
from core.roles import is_admin
from jobs.models import Job, JobProgress, JobState
from remediation import services, spares
from remediation.models import (
    Action,
    Mode,
    Policy,
    PolicyChange,
    Remediation,
    Trigger,
)
from remediation.plans import plan_for
from remediation.transitions import RunStatus

# What an admin may ask for by hand; the other actions are the policies' rungs.
ADMIN_ACTIONS = (
    Action.CORDON,
    Action.UNCORDON,
    Action.DRAIN,
    Action.REPLACE,
    Action.REBOOT,
    Action.TO_INFERENCE,
    Action.TO_TRAINING,
    Action.RETURN_TO_SERVICE,
)
# Actions that put a node back into service: with failed GPUs they need a confirmation.
BACK_TO_SERVICE = (Action.UNCORDON, Action.RETURN_TO_SERVICE)
RETURN_POOLS = ("spare", "original")
# A checkpoint longer than an hour is a job that will not checkpoint at all.
MAX_GRACE_S = 3600
DEFAULT_GRACE_S = 120
MAX_REASON = 200  # the engine appends " [run N]" and the column holds 255
OUT_OF_SERVICE = frozenset(
    {
        NodeStatus.DRAINING,
        NodeStatus.DRAINED,
        NodeStatus.DOWN,
        NodeStatus.FAIL,
        NodeStatus.IN_REPAIR,
    }
)


class ActionError(Exception):
    """Input that cannot be honoured; `field` names the input at fault (a 400)."""

    def __init__(self, message: str, *, field: str = "non_field_errors") -> None:
        super().__init__(message)
        self.message, self.field = message, field


class NotPermitted(PermissionDenied):
    """The user may not do this to this run (a 403 with the reason)."""


class WrongStatus(Exception):
    """The run is no longer in a status that allows this (a 409)."""


def request_action(
    node: Node,
    action: str,
    *,
    user,
    reason: str,
    grace_s: int | None = None,
    confirm: bool = False,
    pool: str = "",
) -> Remediation:
    """An admin's run of `action` on `node`; raises services.NodeBusy if one is active."""
    _require_admin(user)
    reason = _clean_text(reason, field="reason", limit=MAX_REASON)
    if action not in ADMIN_ACTIONS:
        raise ActionError(f"Unknown action {action!r}.", field="action")
    problem = refusal(node, action)
    if problem:
        raise ActionError(problem, field="action")
    failed = failed_gpus(node) if action in BACK_TO_SERVICE else []
    if failed and not confirm:
        raise ActionError(
            _failed_gpu_warning(node, failed) + " Confirm to go ahead.", field="confirm"
        )
    context = {} if grace_s is None else {"grace_s": _check_grace(grace_s)}
    if action == Action.RETURN_TO_SERVICE:
        context["pool"] = return_pool(node, pool or "spare")
    return services.create_run(
        node,
        action,
        trigger=Trigger.ADMIN,
        reason=reason,
        requested_by=user,
        mode=Mode.AUTOMATIC,
        context=context,
        actor=user.get_username(),
    )


def failed_gpus(node: Node) -> list[int]:
    return list(
        Gpu.objects.filter(node=node, health=GpuHealth.FAILED)
        .order_by("index")
        .values_list("index", flat=True)
    )


def _failed_gpu_warning(node: Node, failed: list[int]) -> str:
    listed = ", ".join(str(index) for index in failed)
    return f"{node.name} has failed GPU{'s' if len(failed) > 1 else ''} {listed}."


def return_pool(node: Node, choice: str) -> str:
    """The pool a repaired node goes back to: spare, or the one its replacement left."""
    if choice not in RETURN_POOLS:
        raise ActionError(f"Choose one of {', '.join(RETURN_POOLS)}.", field="pool")
    if choice == "spare":
        return PoolKind.SPARE
    replaced = (
        Remediation.objects.filter(node=node, action=Action.REPLACE)
        .exclude(context__partitions_before=None)
        .order_by("-created_at")
        .first()
    )
    partitions = (replaced.context.get("partitions_before") or []) if replaced else []
    kinds = [POOL_FOR_PARTITION[p] for p in partitions if p in POOL_FOR_PARTITION]
    if not kinds:
        raise ActionError(f"Medbay does not know which pool {node.name} left.", field="pool")
    return kinds[0]


def mark_in_repair(node: Node, *, user, note: str) -> Node:
    """Hand a failed node to the hardware people, with their ticket or a note."""
    _require_admin(user)
    note = _clean_text(note, field="note", limit=255)
    if node.status not in OUT_OF_SERVICE - {NodeStatus.IN_REPAIR}:
        raise ActionError(f"{node.name} is {node.status}; only nodes out of service go to repair.")
    now = timezone.now()
    with transaction.atomic():
        claimed = Node.objects.filter(pk=node.pk, in_repair_since__isnull=True, status=node.status)
        if not claimed.update(in_repair_since=now, repair_note=note, status=NodeStatus.IN_REPAIR):
            raise WrongStatus(f"{node.name} changed meanwhile or is already in repair.")
        NodeStateChange.objects.create(
            node=node,
            from_status=node.status,
            to_status=NodeStatus.IN_REPAIR,
            reason=f"in repair: {note}",
            actor=user.get_username(),
            at=now,
        )
        node_id = node.pk
        transaction.on_commit(lambda: publish_nodes([node_id]))
    node.refresh_from_db()
    return node


def refusal(node: Node, action: str) -> str:
    """Why `action` makes no sense for `node` as it is now; empty when it does."""
    pool = node.pool.kind if node.pool_id else None
    if action == Action.RETURN_TO_SERVICE and node.status not in OUT_OF_SERVICE:
        return f"{node.name} is {node.status}; only nodes out of service return to service."
    if action == Action.CORDON and node.cordoned:
        return f"{node.name} is already cordoned."
    if action == Action.UNCORDON and not (node.cordoned or node.status in OUT_OF_SERVICE):
        return f"{node.name} is in service; there is nothing to uncordon."
    if action == Action.DRAIN and node.status in OUT_OF_SERVICE:
        return f"{node.name} is already {node.status}."
    if action == Action.REPLACE and pool == PoolKind.SPARE:
        return f"{node.name} is a spare; only nodes in service can be replaced."
    if action == Action.TO_INFERENCE and pool != PoolKind.TRAINING:
        return f"Only training nodes can move to inference; {node.name} is {pool or 'in no pool'}."
    if action == Action.TO_TRAINING and pool not in (PoolKind.INFERENCE, PoolKind.SPARE):
        return (
            f"Only inference or spare nodes can move to training; "
            f"{node.name} is {pool or 'in no pool'}."
        )
    return ""


def approve(run: Remediation, user, comment: str = "") -> Remediation:
    """Let an awaiting run go ahead; its requester must leave this to another admin."""
    _require_admin(user)
    if run.requested_by_id is not None and run.requested_by_id == user.pk:
        raise NotPermitted(f"You requested run {run.pk}; another admin must approve it.")
    comment = _clean_text(comment, field="comment", limit=500, required=False)
    return _decide(run, RunStatus.RUNNING, user, comment, verb="Approved")


def reject(run: Remediation, user, comment: str) -> Remediation:
    """Turn an awaiting run down; the comment says why, for the audit trail."""
    _require_admin(user)
    comment = _clean_text(comment, field="comment", limit=500)
    return _decide(run, RunStatus.REJECTED, user, comment, verb="Rejected")


CANCEL_ATTEMPTS = 3


def cancel(run: Remediation, user, comment: str) -> Remediation:
    """Stop an active run where it is; steps already done are not undone."""
    _require_admin(user)
    comment = _clean_text(comment, field="comment", limit=400)
    message = f"Cancelled by {user.get_username()}: {comment}"
    actor = user.get_username()
    # The engine may move the run (running -> waiting) between our read and our
    # update; the update then matches nothing, so read the run again and cancel
    # it from where it now is. A run the engine keeps moving faster than we can
    # catch it is reported, never cancelled with a made-up history.
    for _attempt in range(CANCEL_ATTEMPTS):
        if not run.is_active:
            raise WrongStatus(f"Run {run.pk} is {run.status}; only active runs can be cancelled.")
        if services.transition(run, RunStatus.CANCELLED, message=message, actor=actor):
            run.refresh_from_db()
            return run
        run.refresh_from_db()
    raise WrongStatus(f"Run {run.pk} kept changing while it was being cancelled; try again.")


# Timers a step keeps in the run's context; a retry starts them again, or the step
# would give up at once on its first look.
RETRY_RESETS = ("validate_started_at", "drain_wait_started_at", "crashes")


def retry(run: Remediation, user, comment: str = "") -> Remediation:
    """Run a run in needs_attention again from the step that stopped it."""
    _require_admin(user)
    comment = _clean_text(comment, field="comment", limit=400, required=False)
    if run.status != RunStatus.NEEDS_ATTENTION:
        raise WrongStatus(f"Run {run.pk} is {run.status}; only runs that need attention retry.")
    now = timezone.now()
    context = {k: v for k, v in run.context.items() if k not in RETRY_RESETS}
    context["retried_at"] = now.isoformat()
    actor = user.get_username()
    message = f"Retried by {actor} from step {run.step_name or 'the end'}" + (
        f": {comment}" if comment else ""
    )
    moved = services.transition(
        run, RunStatus.RUNNING, message=message, actor=actor, context=context, due_at=now,
        guard={"current_step": run.current_step},
    )  # fmt: skip
    if not moved:
        run.refresh_from_db()
        raise WrongStatus(f"Run {run.pk} changed meanwhile (now {run.status}); look again.")
    run.refresh_from_db()
    return run


def cancel_and_release(run: Remediation, user, comment: str) -> Remediation:
    """Cancel a stuck run and give the node back to service through the engine (an
    uncordon run, which still leaves alone a node someone else holds)."""
    comment = _clean_text(comment, field="comment", limit=150)
    with transaction.atomic():
        cancel(run, user, comment)
        node = Node.objects.select_related("pool").get(pk=run.node_id)
        return services.create_run(
            node,
            Action.UNCORDON,
            trigger=Trigger.ADMIN,
            reason=f"release after cancelling run {run.pk}: {comment}",
            requested_by=user,
            mode=Mode.AUTOMATIC,
            actor=user.get_username(),
        )


def _decide(run: Remediation, new: RunStatus, user, comment: str, *, verb: str) -> Remediation:
    if run.status != RunStatus.AWAITING_APPROVAL:
        raise WrongStatus(f"Run {run.pk} is {run.status}, not awaiting approval.")
    with transaction.atomic():
        # Claim the decision first: two admins clicking at once must not both
        # win, and `transition` alone would let a late approval revive a run
        # the engine has already moved on from.
        claimed = Remediation.objects.filter(
            pk=run.pk, status=RunStatus.AWAITING_APPROVAL, decided_at__isnull=True
        ).update(decided_at=timezone.now(), approved_by=user, decision_comment=comment)
        if not claimed:
            raise WrongStatus(f"Run {run.pk} was decided by someone else meanwhile.")
        message = f"{verb} by {user.get_username()}" + (f": {comment}" if comment else "")
        if not services.transition(run, new, message=message, actor=user.get_username()):
            raise WrongStatus(f"Run {run.pk} changed status meanwhile.")
    run.refresh_from_db()
    return run


def save_policy(policy: Policy, *, user) -> Policy:
    """Create or change a policy, recording who changed it, when, and from what."""
    _require_admin(user)
    return save_audited(
        policy,
        user=user,
        record_change=lambda before, after: PolicyChange.objects.create(
            policy=policy,
            subject=policy.subject,
            before=before,
            after=after,
            changed_by=user,
            changed_at=policy.updated_at,
        ),
    )


def _require_admin(user) -> None:
    if not is_admin(user):
        raise NotPermitted("Only admins may do this.")


def _clean_text(value, *, field: str, limit: int, required: bool = True) -> str:
    text = " ".join(str(value or "").split())
    if required and not text:
        raise ActionError("This field is required.", field=field)
    if len(text) > limit:
        raise ActionError(f"At most {limit} characters.", field=field)
    return text


def _check_grace(grace_s) -> int:
    if isinstance(grace_s, bool) or not isinstance(grace_s, int):
        raise ActionError("A whole number of seconds.", field="grace_s")
    if not 0 <= grace_s <= MAX_GRACE_S:
        raise ActionError(f"Between 0 and {MAX_GRACE_S} seconds.", field="grace_s")
    return grace_s


# ------------------------------------------------------------------ preview


@dataclass(frozen=True)
class AffectedJob:
    """A running job on the node and how much work it could lose."""

    slurm_id: int
    name: str
    user: str
    gpus: int
    partition: str
    last_checkpoint_at: datetime | None
    since_checkpoint: timedelta | None


@dataclass(frozen=True)
class Impact:
    """What a run of `action` on `node` would do, shown before an admin confirms."""

    node: Node
    action: str
    steps: list[str]
    jobs: list[AffectedJob]
    interrupts_jobs: bool
    grace_s: int
    spares: list[str] = field(default_factory=list)
    # Free spares the replace would not take, and why (remediation/spares.py).
    spares_skipped: dict[str, str] = field(default_factory=dict)
    refusal: str = ""
    # Put back into service with these GPUs marked failed: warned, needs a confirmation.
    failed_gpus: list[int] = field(default_factory=list)
    held_by: str = ""

    @property
    def users(self) -> list[str]:
        return sorted({job.user for job in self.jobs if job.user})

    @property
    def gpu_count(self) -> int:
        return sum(job.gpus for job in self.jobs)


def impact_preview(node: Node, action: str, *, steps: list[str] | None = None) -> Impact:
    """The running jobs, users and GPUs `action` touches, and spares for a replace."""
    steps = plan_for(action) if steps is None else steps
    now = timezone.now()
    jobs = list(
        Job.objects.filter(nodes=node, state=JobState.RUNNING)
        .order_by("slurm_id")
        .only("pk", "slurm_id", "name", "user", "gpus", "partition")
    )
    checkpoints = last_checkpoints([job.pk for job in jobs])
    affected = [_affected(job, checkpoints.get(job.pk), now) for job in jobs]
    replaces = "check_eligibility" in steps or "replace" in steps
    choice = spare_nodes(node) if replaces else spares.SpareChoice()
    return Impact(
        node=node,
        action=action,
        steps=steps,
        jobs=affected,
        # Drain-only plans let jobs finish; these plans signal and requeue them.
        interrupts_jobs="requeue_jobs" in steps,
        grace_s=_grace_for(node, {job.partition for job in jobs}),
        spares=choice.offered,
        spares_skipped=choice.skipped,
        refusal=refusal(node, action),
        failed_gpus=failed_gpus(node) if action in BACK_TO_SERVICE else [],
        held_by=" and ".join(filter(None, (node.held_by, node.fleet_held_by))),
    )


def run_impact(run: Remediation, *, from_step: int = 0) -> Impact:
    """What RUN's own plan (from FROM_STEP on) touches: its planned steps, not the
    action's usual ones, and the other holders the run itself recorded. A request typed
    in Slurm is the admin's hold that the run answers, not someone else's to leave in
    place, and a node already out of service is no reason to refuse it."""
    impact = impact_preview(run.node, run.action, steps=run.planned_steps[from_step:])
    if run.trigger == Trigger.SLURM:
        impact = replace(impact, refusal="")
    if "held_by" in (run.context or {}):
        impact = replace(impact, held_by=holders.describe(run.context["held_by"]))
    return impact


def _affected(job: Job, checkpoint_at: datetime | None, now: datetime) -> AffectedJob:
    return AffectedJob(
        slurm_id=job.slurm_id,
        name=job.name,
        user=job.user,
        gpus=job.gpus,
        partition=job.partition,
        last_checkpoint_at=checkpoint_at,
        since_checkpoint=max(now - checkpoint_at, timedelta(0)) if checkpoint_at else None,
    )


def last_checkpoints(job_pks: list[int]) -> dict[int, datetime]:
    """When each job last reported a saved checkpoint, by job pk; {} if unknown."""
    if not job_pks:
        return {}
    rows = (
        JobProgress.objects.filter(job_id__in=job_pks, checkpoint_saved=True)
        .values("job_id")
        .annotate(at=Max("reported_at"))
    )
    return {row["job_id"]: row["at"] for row in rows}


def spare_nodes(node: Node) -> spares.SpareChoice:
    """Idle spares of the node's cluster, as the last sync saw them, chosen among as
    the replace step will choose."""
    idle = Node.objects.filter(
        cluster_id=node.cluster_id, pool__kind=PoolKind.SPARE, status=NodeStatus.SPARE
    ).values_list("name", flat=True)
    return spares.choose(node.cluster_id, idle, exclude=[node.name])


def _grace_for(node: Node, partitions: set[str]) -> int:
    names = partitions or {name for name in node.partition_names.split(",") if name}
    graces = Partition.objects.filter(cluster_id=node.cluster_id, name__in=names).values_list(
        "checkpoint_grace_s", flat=True
    )
    return max(graces, default=DEFAULT_GRACE_S)


def action_menu(node: Node) -> list[tuple[str, str, str]]:
    """(action, label, why not) for the node page's buttons; "why not" empty when allowed."""
    return [(str(a), a.label, refusal(node, a)) for a in ADMIN_ACTIONS]
