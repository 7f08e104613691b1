"""Steps that act on the node itself: drain, cordon, reboot, reset, pools, resume."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from clusters import holders
from clusters.backends.capabilities import RepairsGpus, ReportsFleetHolders, ReportsGpuHealth
from clusters.models import Gpu, GpuHealth, Node, NodePool
from jobs.models import Job
from remediation import ownership
from remediation.models import Action
from remediation.steps import (
    holds,
    needs_attention,
    skipped,
    step,
    succeeded,
    waiting,
)
from remediation.steps.jobs import requeue_or_cancel
from remediation.steps.records import record_membership

QUARANTINE_REASON = "medbay: quarantined, flapping"
POOL_FOR_ACTION = {Action.TO_INFERENCE: "inference", Action.TO_TRAINING: "training"}
DRAINED_POLL_S = 5.0


@step("drain", "drain {node} so that no new job lands on it")
def drain(run, ctx):
    info = ctx.node(run.node.name)
    reason = ownership.reason_for(run, ctx, info=info)
    if info is not None and "drain" in info.flags and info.reason == reason:
        return skipped(f"{run.node.name} is already drained: {reason}")
    ctx.backend.drain_node(run.node.name, reason)
    return succeeded(f"drained {run.node.name}: {reason}")


@step("cordon", "cordon {node} in the fleet")
def cordon(run, ctx):
    ctx.fleet.cordon(run.node.name, ownership.reason_for(run, ctx))
    Node.objects.filter(pk=run.node_id).update(cordoned=True, **_fleet_holds(run, ctx))
    return succeeded(f"cordoned {run.node.name}")


@step("uncordon", "uncordon {node} in the fleet (Medbay's own cordon only)")
def uncordon(run, ctx):
    # The spare-pool fleet's uncordon is a Slurm resume, which must not undo another
    # party's drain; a Kubernetes uncordon removes only Medbay's own taint and cordon.
    held = ownership.hand_back(run, ctx, "uncordon")
    if held is not None:
        return held
    ctx.fleet.uncordon(run.node.name)
    Node.objects.filter(pk=run.node_id).update(cordoned=False, **_fleet_holds(run, ctx))
    others = _fleet_holds(run, ctx).get("fleet_held_by")
    if others:
        return succeeded(f"removed Medbay's cordon of {run.node.name}; still held by {others}")
    return succeeded(f"uncordoned {run.node.name}")


def _fleet_holds(run, ctx) -> dict:
    """Other controllers' cordons and taints, for fleets that can tell (Kubernetes);
    a fleet that cannot leaves the record as it is."""
    if not isinstance(ctx.fleet, ReportsFleetHolders):
        return {}
    return {"fleet_held_by": "; ".join(ctx.fleet.holders(run.node.name))[:255]}


@step("resume", "resume {node} in Slurm, unless someone else still holds it")
def resume(run, ctx):
    held = ownership.hand_back(run, ctx)
    if held is not None:
        return held
    ctx.backend.resume_node(run.node.name)
    return succeeded(f"resumed {run.node.name}")


@step("reboot", "reboot {node} once idle (scontrol reboot ASAP nextstate=resume)")
def reboot(run, ctx):
    info = ctx.node(run.node.name)
    if info is not None and info.flags & {"reboot_requested", "reboot_issued"}:
        return skipped(f"a reboot of {run.node.name} is already pending")
    if ctx.context.get("reboot_requested_at"):
        return skipped(f"{run.node.name} was already asked to reboot")
    held = ownership.held_by_others(run, ctx, info)
    if held:
        # nextstate=resume would put the node back into service after the boot,
        # undoing the other party's drain.
        return needs_attention(
            f"{run.node.name} is also held by {holders.describe(held)}; Medbay does not "
            "reboot it, since Slurm resumes a node after the reboot. Reboot it by hand or "
            "release that hold, then retry this run."
        )
    # Slurm resumes the node after its boot: held first, so that it takes no job before
    # the validate step's checks pass.
    holds.hold(ctx, run.node.name)
    ctx.backend.reboot_node(run.node.name, ownership.reason_for(run, ctx))
    ctx.context["reboot_requested_at"] = ctx.now.isoformat()
    return succeeded(f"reboot of {run.node.name} requested")


@step("reset_gpu", "reset the faulty GPU of {node}")
def reset_gpu(run, ctx):
    gpus = _gpus_to_reset(run, ctx)
    if isinstance(ctx.backend, RepairsGpus):
        for index in gpus:
            ctx.backend.repair_gpu(run.node.name, index)
        return succeeded(f"reset GPU(s) {_list(gpus)} of {run.node.name}")
    if ctx.context.get("reset_requested_at"):
        # An admin retried the run after the manual reset the message asked for.
        return succeeded(f"GPU(s) {_list(gpus)} of {run.node.name} reset by an admin")
    # The backend cannot reset a GPU (Slurm): an admin does, on the drained node.
    ctx.backend.drain_node(run.node.name, ownership.reason_for(run, ctx))
    ctx.context["reset_requested_at"] = ctx.now.isoformat()
    return needs_attention(
        f"Reset GPU {_list(gpus)} on {run.node.name} with `nvidia-smi -r -i N` (the node is "
        "drained and its jobs requeued), then retry this run to validate and resume it."
    )


def _gpus_to_reset(run, ctx) -> list[int]:
    """The GPU the fault named, else those the backend knows unhealthy; [] (all of
    them) when it knows none, as Slurm, which has no view of a GPU's health."""
    if ctx.context.get("gpu") is not None:
        return [int(ctx.context["gpu"])]
    if isinstance(ctx.backend, ReportsGpuHealth):
        health = ctx.backend.gpu_health(run.node.name)
        return sorted(index for index, state in health.items() if state != "healthy")
    return []


def _list(gpus: list[int]) -> str:
    return ", ".join(str(index) for index in gpus) or "(all)"


@step("move_pool", "move {node} to the {pool} pool")
def move_pool(run, ctx):
    pool = POOL_FOR_ACTION[run.action]
    ctx.fleet.move_to_pool(run.node.name, pool)
    NodePool.objects.get_or_create(
        cluster_id=run.node.cluster_id, name=pool, defaults={"kind": pool}
    )
    record_membership(run.node.cluster_id, ctx.backend, [run.node.name])
    return succeeded(f"moved {run.node.name} to the {pool} pool")


@step("return_pool", "put {node} back in its pool (spare or the one it left)")
def return_pool(run, ctx):
    pool = ctx.context.get("pool") or "spare"
    ctx.fleet.move_to_pool(run.node.name, pool)
    NodePool.objects.get_or_create(
        cluster_id=run.node.cluster_id, name=pool, defaults={"kind": pool}
    )
    record_membership(run.node.cluster_id, ctx.backend, [run.node.name])
    # It passed the replacement path's checks: the repair is done, its GPUs are sound.
    Gpu.objects.filter(node_id=run.node_id).exclude(health=GpuHealth.HEALTHY).update(
        health=GpuHealth.HEALTHY,
        health_reason=f"repaired; validated by run {run.pk}",
        health_changed_at=ctx.now,
    )
    Node.objects.filter(pk=run.node_id).update(in_repair_since=None, repair_note="", cordoned=False)
    return succeeded(f"{run.node.name} is back in the {pool} pool")


@step("wait_drained", "wait until {node} runs no jobs", polls=True)
def wait_drained(run, ctx):
    jobs = ctx.running_jobs_on(run.node.name)
    if not jobs:
        return succeeded(f"{run.node.name} runs no jobs")
    if not ctx.context.get("drain_wait_started_at"):
        ctx.context["drain_wait_started_at"] = ctx.now.isoformat()
    limit = ctx.context.get("preempt_after_s")
    waited = ctx.since("drain_wait_started_at")
    ids = ", ".join(str(job.job_id) for job in jobs)
    if limit is not None and waited is not None and waited.total_seconds() >= limit:
        requeued, cancelled = requeue_or_cancel(run, ctx, jobs)
        return waiting(f"preempted jobs {ids} after {limit}s (requeued {requeued})", 1)
    deadline = None
    if limit is not None and waited is not None:
        deadline = ctx.now + timedelta(seconds=limit) - waited
    estimate = drain_estimate(run, [job.job_id for job in jobs], deadline)
    jobs_word = f"job{'s' if len(jobs) > 1 else ''}"
    message = f"waiting for {jobs_word} {ids} to end on {run.node.name}; {estimate}"
    return waiting(message, DRAINED_POLL_S)


def drain_estimate(run, job_ids: list[int], preempt_at=None) -> str:
    """When the node should be free, from the jobs' time limits as the sync recorded
    them (wall-clock times, whatever clock the backend keeps), and Medbay's own
    preemption deadline if the run has one."""
    rows = Job.objects.filter(cluster_id=run.node.cluster_id, slurm_id__in=job_ids)
    ends, endless = [], []
    for slurm_id, start, minutes in rows.values_list("slurm_id", "start_at", "time_limit_minutes"):
        if not minutes:
            endless.append(str(slurm_id))
        else:
            ends.append((start or timezone.now()) + timedelta(minutes=minutes))
    if endless:
        stops = "it ends when its owner or an admin stops it"
        words = f"job {', '.join(endless)} has no time limit: {stops}"
    elif ends:
        words = f"expected free by {_hhmm(max(ends))}, when the last reaches its time limit"
    else:
        words = "no estimate: Medbay has not recorded these jobs yet"
    if preempt_at is not None and (endless or not ends or preempt_at < max(ends)):
        words += f"; Medbay preempts them at {_hhmm(preempt_at)}"
    return words


def _hhmm(at) -> str:
    return timezone.localtime(at).strftime("%H:%M")


@step("notify", "tell the admins about {node}")
def notify(run, ctx):
    return succeeded(f"admins notified: {run.reason}")


@step("quarantine", "quarantine {node}: drained, kept out of service")
def quarantine(run, ctx):
    info = ctx.node(run.node.name)
    if info is None or "drain" not in info.flags or info.reason != QUARANTINE_REASON:
        ctx.backend.drain_node(run.node.name, QUARANTINE_REASON)
    Node.objects.filter(pk=run.node_id).update(cordoned=True)
    faults = ctx.context.get("faults", "repeated")
    return needs_attention(
        f"{run.node.name} is flapping ({faults} faults) and is quarantined: drained and kept "
        "out of service. Triage the hardware, then cancel this run and resume the node."
    )
