"""Steps that swap hardware: eligibility, replacement by a spare, validation.

Which spare comes in is remediation.spares' choice, never the fleet's first
free one. Whether a node passes validation is health.validation's policy; this module
decides when to ask and what becomes of a node that fails. A replacement that fails
validation goes to repair and the next healthy spare takes its place within the same
run; a spare's own fault sends it to repair (there is nothing to hand over to another
spare).
"""

from __future__ import annotations

from datetime import timedelta

from django.utils.dateparse import parse_datetime

from clusters import holders
from clusters.backends.base import nodes_named
from clusters.backends.slurm_spares import SPARE_PARTITION
from clusters.live import publish_nodes
from clusters.models import Node
from health.validation import CannotValidate
from remediation import ownership, safety, spares
from remediation.models import Action, Remediation, StepOutcome, Trigger, action_words
from remediation.services import slurm_reason
from remediation.steps import (
    StepResult,
    failed,
    holds,
    needs_attention,
    skipped,
    step,
    succeeded,
    waiting,
)
from remediation.steps.nodes import QUARANTINE_REASON
from remediation.steps.records import record_membership
from remediation.transitions import RunStatus

REPLACE_REASON = "Action:Replace"
# A rebooting node takes minutes to come back; after this the run asks a human.
VALIDATE_PATIENCE_S = 600
VALIDATE_POLL_S = 5.0
# After a rejected spare is swapped out, the next one is looked at this soon: Slurm
# shows the swap at once, and the requeued jobs are waiting for it.
REJECTED_RECHECK_S = 1.0
# A run on the replacement itself that is acting on it (not awaiting approval).
ACTING = (RunStatus.RUNNING, RunStatus.WAITING, RunStatus.NEEDS_ATTENTION)
# How long the eligibility check waits for spares that are not registered yet (after a
# controller restart) before it asks an admin, and how often it looks again.
SPARE_REGISTRATION_WAIT = timedelta(seconds=60)
SPARE_RECHECK_S = 2.0


@step("check_eligibility", "check that a healthy free spare exists and automation may go on")
def check_eligibility(run, ctx):
    if ctx.context.get("replacement"):
        return skipped(f"already replaced by {ctx.context['replacement']}")
    if serves_no_pool(ctx.node(run.node.name)):
        return skipped(f"{run.node.name} is a spare, in no pool in service: nothing to replace")
    automatic = run.trigger != Trigger.ADMIN
    if automatic:
        faults = safety.fault_count(run.node)
        if faults >= safety.flap_threshold():
            ctx.backend.drain_node(run.node.name, QUARANTINE_REASON)
            Node.objects.filter(pk=run.node_id).update(cordoned=True)
            return needs_attention(
                f"{run.node.name} is flapping ({faults} faults in "
                f"{safety.flap_window_hours()} h): quarantined instead of replaced. Triage the "
                "hardware, then cancel this run."
            )
        blocked = safety.breaker_blocks(run.node, exclude_run=run.pk)
        if blocked:
            return needs_attention(f"Circuit breaker open: {blocked}. Retry once it closes.")
    choice = spares.choose(run.node.cluster_id, ctx.fleet.spare_capacity(), exclude=[run.node.name])
    if not choice.offered:
        unsettled = _spares_settling(run, ctx)
        waited = ctx.since("spares_awaited_at")
        if unsettled and (waited is None or waited < SPARE_REGISTRATION_WAIT):
            # Just after slurmctld restarts, nodes read `unknown` until their slurmd
            # registers again, and a node just resumed reads `not_responding` until it
            # answers Slurm's ping (seconds, longer on a loaded controller): a spare
            # among them may be free in a moment.
            if waited is None:
                ctx.remember(spares_awaited_at=ctx.now.isoformat())
            return waiting(
                f"No free spare yet: {'; '.join(unsettled)}; checking again",
                SPARE_RECHECK_S,
            )
        return _no_spare(run, choice)
    return succeeded(choice.describe())


def _no_spare(run, choice: spares.SpareChoice, *, rejected: str = ""):
    unsound = f"; not offered, as Medbay knows them unsound: {choice.skipped_text()}"
    return needs_attention(
        f"{rejected}No free spare to replace {run.node.name}: the spare pool is empty or "
        f"busy{unsound if choice.skipped else ''}. Add or free a spare, then retry "
        f"this run; {run.node.name} stays drained."
    )


def serves_no_pool(info) -> bool:
    """In the spare partition or in none: a node with nothing to hand over to a spare."""
    return info is not None and not [p for p in info.partitions if p != SPARE_PARTITION]


def _spares_settling(run, ctx) -> list[str]:
    """Spare-partition nodes Slurm may offer in a moment, each with why not yet: not
    registered since slurmctld started (`unknown`), or not answering its ping yet
    (`not_responding`, neither down nor drained: Slurm marks a node so when it is
    resumed, until its slurmd answers). A drained, failed or down spare waits for a
    person, not for Slurm."""
    found = []
    for info in ctx.backend.nodes():
        if SPARE_PARTITION not in info.partitions or info.name == run.node.name:
            continue
        if info.state == "unknown":
            found.append(f"{info.name} not registered with Slurm (controller restarted?)")
        elif (
            "not_responding" in info.flags
            and info.state != "down"
            and not info.flags & {"drain", "fail"}
        ):
            found.append(f"{info.name} not responding to Slurm yet (just resumed?)")
    return sorted(found)


@step("replace", "replace {node} with a healthy free spare and take it out of service")
def replace(run, ctx):
    done = _replacement_already_made(run, ctx)
    if done:
        ctx.context["replacement"] = done
        return skipped(f"{run.node.name} was already replaced by {done}")
    info = ctx.node(run.node.name)
    if info is None:
        return failed(f"{run.node.name} is not known to the cluster any more")
    if serves_no_pool(info):
        return _spare_to_repair(run, ctx, info)
    free = ctx.fleet.spare_capacity()
    choice = spares.choose(run.node.cluster_id, free, exclude=[run.node.name])
    if not choice.offered:
        return _no_spare(run, choice)
    # Written down before the swap, so that a worker that dies during it lets the
    # next one recognise the swap instead of taking a second spare.
    ctx.remember(
        spares_before=free,
        partitions_before=[name for name in info.partitions if name != SPARE_PARTITION],
        replaced_at=ctx.now.isoformat(),
    )
    reason = ownership.reason_for(run, ctx, REPLACE_REASON, info=info)
    offered = choice.offered
    # Held before it joins the pool, so no job lands on it before its checks pass.
    if holds.hold(ctx, offered[0]):
        offered = offered[:1]
    replacement = ctx.fleet.replace(run.node.name, reason, spares=offered)
    holds.hold(ctx, replacement)  # a fleet that chose another spare itself
    ctx.context["replacement"] = replacement
    _record_pools(run, ctx, replacement)
    skipped_text = f" (not offered: {choice.skipped_text()})" if choice.skipped else ""
    return succeeded(
        f"{replacement} replaces {run.node.name}; {run.node.name} marked fail{skipped_text}"
    )


def _spare_to_repair(run, ctx, info):
    """A spare's own fault: there is nothing to hand over, so it stays drained (the
    run's drain step) and goes to repair, which keeps it from being offered."""
    reason = ownership.reason_for(run, ctx, info=info)
    _drain_unless_shown(ctx, info, reason)
    _send_to_repair(run, ctx, run.node.name, f"{run.reason} [run {run.pk}]")
    ctx.context["sent_to_repair"] = run.node.name
    return succeeded(
        f"{run.node.name} is a spare: nothing to replace; kept drained and sent to repair"
    )


def _send_to_repair(run, ctx, name: str, note: str) -> None:
    node = Node.objects.filter(cluster_id=run.node.cluster_id, name=name)
    node.filter(in_repair_since__isnull=True).update(
        in_repair_since=ctx.now, repair_note=note[:255], cordoned=True
    )
    ids = list(node.values_list("pk", flat=True))
    ctx.after_commit.append(lambda: publish_nodes(ids))


def _replacement_already_made(run, ctx) -> str:
    if ctx.context.get("replacement"):
        return ctx.context["replacement"]
    done = _swap_made(
        ctx, run.node.name, ctx.context.get("spares_before"), ctx.context.get("partitions_before")
    )
    if done:
        _record_pools(run, ctx, done)
    return done


def _swap_made(ctx, failed_name: str, spares_before, partitions_before) -> str:
    """The spare of SPARES_BEFORE that already holds FAILED_NAME's partitions, FAILED_NAME
    marked fail: a swap made by a worker that died before it could record it."""
    if not spares_before:
        return ""
    names = [failed_name, *spares_before]
    nodes = {info.name: info for info in nodes_named(ctx.backend, names)}
    failed_node = nodes.get(failed_name)
    if failed_node is None or "fail" not in failed_node.flags:
        return ""
    wanted = set(partitions_before or [])
    for name in spares_before:
        info = nodes.get(name)
        if info is not None and wanted and wanted <= set(info.partitions):
            return name
    return ""


def _record_pools(run, ctx, replacement: str) -> None:
    """Medbay's pool record: the spare takes the failed node's place, which leaves service."""
    record_membership(run.node.cluster_id, ctx.backend, [run.node.name, replacement])
    Node.objects.filter(pk=run.node_id).update(cordoned=True)


# `polls`: most passes only look, and the timeline gets a row per change of outcome
# (waiting, a spare rejected, passed), not one per look every VALIDATE_POLL_S. A pass
# that rejects a spare acts, so it writes its intent into the run's context first.
@step("validate", "check the node that takes over passes the health checks", polls=True)
def validate(run, ctx):
    if ctx.context.get("sent_to_repair"):
        return skipped(f"{ctx.context['sent_to_repair']} went to repair: nothing to validate")
    if ctx.context.get("rejecting"):  # a worker died while rejecting a spare
        pending = ctx.context["rejecting"]
        return _reject_replacement(run, ctx, pending["node"], pending["why"])
    if ctx.context.get("replacement"):
        handled = _replacement_handled_elsewhere(run, ctx)
        if handled is not None:
            return handled
        target = ctx.context["replacement"]
        known = spares.unsound(run.node.cluster_id, [target]).get(target)
        if known:
            # Nothing to wait for: a GPU the agent reported failed stays failed until repair.
            return _reject_replacement(run, ctx, target, known)
    target = ctx.context.get("replacement") or run.node.name
    held = holds.hold(ctx, target)
    info = ctx.node(target)
    problem = _not_ready(info, target)
    if not problem:
        # What must pass is health's policy (health.validation); when and what to do
        # about a node that does not pass is this step's.
        try:
            ok, message = ctx.validator(ctx.backend, target)
        except CannotValidate as error:
            return _checks_failed(run, ctx, target, f"cannot be validated: {error.message}")
        if ok:
            holds.release(ctx)
            where = " in a maintenance reservation" if held else ""
            return succeeded(f"{target} passed validation{where}: {message}")
        problem = message
    ctx.context.setdefault("validate_started_at", ctx.now.isoformat())
    waited = ctx.since("validate_started_at")
    if waited is not None and waited.total_seconds() > VALIDATE_PATIENCE_S:
        if ctx.context.get("replacement"):
            return _reject_replacement(
                run, ctx, target, f"not valid after {VALIDATE_PATIENCE_S} s: {problem}"
            )
        return _checks_failed(run, ctx, target, f"did not pass validation: {problem}")
    return waiting(f"{target} not valid yet: {problem}", VALIDATE_POLL_S)


def _checks_failed(run, ctx, target: str, why: str):
    """TARGET failed its checks (or nothing may judge it): it stays out of service with
    the failing check in its reason (a reboot's `nextstate=resume` had put it back),
    its hold is let go, and the run asks an admin."""
    reason = slurm_reason(run, f"{target} {why}")[: holders.REASON_MAX]
    _drain_unless_shown(ctx, ctx.node(target), reason)
    holds.release(ctx)
    return needs_attention(f"{target} {why}; then retry.")


def _replacement_handled_elsewhere(run, ctx):
    """While the replacement has a run of its own acting on it (its agent reported a
    fault during validation), that run decides its fate: swapping it here as well
    would take a second spare for one fault. If that run replaced it, its replacement
    is this run's. Returns the step's result while waiting, else None."""
    target = ctx.context["replacement"]
    own = Remediation.objects.filter(node__cluster_id=run.node.cluster_id, node__name=target)
    acting = own.filter(status__in=ACTING).order_by("-pk").first()
    if acting is not None:
        ctx.context.setdefault("validate_started_at", ctx.now.isoformat())
        waited = ctx.since("validate_started_at")
        message = f"{target} is in remediation by run {acting.pk} ({action_words(acting.action)})"
        if waited is not None and waited.total_seconds() > VALIDATE_PATIENCE_S:
            return needs_attention(f"{message}; retry this run once that run ends")
        return waiting(f"{message}; waiting for it to end", VALIDATE_POLL_S)
    since = parse_datetime(ctx.context.get("replaced_at") or "")
    if since is not None:
        took_over = (
            own.filter(action=Action.REPLACE, status=RunStatus.SUCCEEDED, created_at__gte=since)
            .filter(context__has_key="replacement")
            .order_by("-pk")
            .first()
        )
        if took_over is not None:
            ctx.remember(replacement=took_over.context["replacement"])
            ctx.context.pop("validate_started_at", None)
    return None


def _reject_replacement(run, ctx, target: str, why: str):
    """TARGET, this run's replacement, failed validation: it is drained with Medbay's
    reason and sent to repair, and the next healthy free spare takes its place."""
    rejected = dict(ctx.context.get("rejected_spares") or {})
    pending = ctx.context.get("rejecting") or {}
    if pending.get("node") != target:
        info = ctx.node(target)
        pending = {
            "node": target,
            # A retry after no spare was left finds it in repair: the first reason stands.
            "why": rejected.get(target) or why[:200],
            "spares_before": ctx.fleet.spare_capacity(),
            "partitions_before": [
                p for p in (info.partitions if info else ()) if p != SPARE_PARTITION
            ],
        }
        ctx.remember(rejecting=pending)  # the intent, before touching Slurm
    rejected[target] = pending["why"]
    if ctx.context.get(holds.HOLD_KEY) == target:
        holds.release(ctx)  # drained below: the hold has done its work
    text = f"failed validation replacing {run.node.name}: {pending['why']}"
    reason = slurm_reason(run, text)[: holders.REASON_MAX]
    _send_to_repair(run, ctx, target, reason)
    done = _swap_made(ctx, target, pending["spares_before"], pending["partitions_before"])
    if not done:
        _drain_unless_shown(ctx, ctx.node(target), reason)
        free = ctx.fleet.spare_capacity()
        choice = spares.choose(run.node.cluster_id, free, exclude=[run.node.name, *rejected])
        if not choice.offered:
            ctx.context.pop("rejecting", None)
            ctx.context["rejected_spares"] = rejected
            failure = f"{target} failed validation ({pending['why']}): drained, sent to repair. "
            return _no_spare(run, choice, rejected=failure)
        done = ctx.fleet.replace(target, reason, spares=choice.offered)
    record_membership(run.node.cluster_id, ctx.backend, [target, done])
    ctx.context.pop("rejecting", None)
    ctx.context.pop("validate_started_at", None)
    ctx.context.update(replacement=done, rejected_spares=rejected, replaced_at=ctx.now.isoformat())
    return StepResult(
        StepOutcome.FAILED,
        f"{target} failed validation: {pending['why']}; drained and sent to repair; "
        f"{done} takes its place",
        retry_after=timedelta(seconds=REJECTED_RECHECK_S),
    )


def _drain_unless_shown(ctx, info, reason: str) -> None:
    """Drain the node INFO describes with REASON, unless Slurm already shows exactly that
    (a step run again after a crash) or no longer reports the node."""
    if info is not None and not ("drain" in info.flags and info.reason == reason):
        ctx.backend.drain_node(info.name, reason)


def _not_ready(info, name: str) -> str:
    if info is None:
        return f"{name} is not reported by the cluster"
    if info.state == "down" or "not_responding" in info.flags:
        return f"{name} is {info.state} and not responding"
    if info.flags & {"reboot_requested", "reboot_issued"}:
        return f"{name} is rebooting"
    return ""
