"""Steps that act on the node's jobs: checkpoint signal, grace, requeue, early release.

The job ids and their restart counts are kept in the run's context when the
jobs are signalled, so that a re-run after a crash recognises a job it already
requeued (its restart count went up) instead of requeueing it twice.
"""

from __future__ import annotations

from django.utils import timezone

from clusters.backends.base import BackendError
from clusters.models import Partition
from remediation.models import JobEffect
from remediation.steps import (
    failed,
    needs_attention,
    skipped,
    step,
    succeeded,
    waiting,
)

DEFAULT_GRACE_S = 120
FINISHED = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY"}
)
# Slurm starts a requeued job by itself once the old credential expires; past
# this, waiting to release it early gains nothing.
RELEASE_PATIENCE_S = 300
# How long after `start_now` the job is checked again: a too-early release shows
# up as the job being killed ("Job credential revoked") within moments.
DEFAULT_VERIFY_AFTER_S = 2.0


@step("signal_jobs", "send USR1 to the batch scripts of the jobs on {node}")
def signal_jobs(run, ctx):
    jobs = ctx.running_jobs_on(run.node.name)
    known = ctx.context.setdefault("jobs", {})
    signalled = []
    for job in jobs:
        try:
            ctx.backend.signal_job(job.job_id, "USR1", batch_only=True)
        except BackendError as error:
            if error.permanent and _finished(ctx, job.job_id):
                continue  # it ended between listing and signalling: nothing to save
            raise
        signalled.append(job.job_id)
        known.setdefault(str(job.job_id), _job_record(job))
    if not known:
        return skipped(f"no running jobs on {run.node.name}")
    ctx.record_jobs(
        run, JobEffect.SIGNALLED, {job.job_id: job.nodes for job in jobs if job.job_id in signalled}
    )
    # The grace counts from the signals, not from the step's start: listing and
    # signalling took 0.8 s on Slurm 26.05 (tests/remediation/test_engine_on_slurm.py).
    ctx.context["signalled_at"] = timezone.now().isoformat()
    ctx.notify_owners(run, signalled, "signalled")
    return succeeded(f"sent USR1 to job(s) {_ids(signalled)}")


def _job_record(job) -> dict:
    return {
        "restart_count": job.restart_count,
        "requeue": job.requeue,
        "partition": job.partition,
        "nodes": list(job.nodes),
        "user": job.user,
    }


def _finished(ctx, job_id: int) -> bool:
    info = ctx.jobs().get(job_id)
    return info is None or info.state in FINISHED


@step("wait_grace", "give the jobs their checkpoint grace", polls=True)
def wait_grace(run, ctx):
    jobs = ctx.context.get("jobs") or {}
    if not jobs:
        return skipped("no jobs to wait for")
    grace = grace_seconds(run, jobs)
    # Kept so the job's story names the grace used, not a default (jobs/timeline.py).
    ctx.context["grace_used_s"] = grace
    elapsed = ctx.since("signalled_at")
    if elapsed is None:
        return failed("the jobs were never signalled; the plan is out of order")
    left = grace - elapsed.total_seconds()
    if left > 0:
        return waiting(f"checkpoint grace: {left:.0f}s of {grace}s left", left)
    return succeeded(f"grace of {grace}s over")


def grace_seconds(run, jobs: dict) -> int:
    """The run's own grace if set, else the longest of the jobs' partitions."""
    if run.context.get("grace_s") is not None:
        return int(run.context["grace_s"])
    names = {record.get("partition") for record in jobs.values()} - {None, ""}
    graces = Partition.objects.filter(cluster_id=run.node.cluster_id, name__in=names).values_list(
        "checkpoint_grace_s", flat=True
    )
    return max(graces, default=DEFAULT_GRACE_S)


@step("requeue_jobs", "requeue the requeueable jobs, cancel the others")
def requeue_jobs(run, ctx):
    records = ctx.context.get("jobs") or {}
    if not records:
        return skipped("no jobs to requeue")
    current = ctx.jobs()
    requeued, cancelled, gone = [], [], []
    for key, record in records.items():
        info = current.get(int(key))
        if info is None or info.state in FINISHED:
            gone.append(int(key))
        elif info.restart_count > record["restart_count"] or info.state == "PENDING":
            requeued.append(info.job_id)  # done before a crash; do not requeue twice
        elif record["requeue"]:
            ctx.backend.requeue_job(info.job_id)
            requeued.append(info.job_id)
            ctx.notify_owners(run, [info.job_id], "requeued")
        else:
            ctx.backend.cancel_job(info.job_id)
            cancelled.append(info.job_id)
            ctx.notify_owners(run, [info.job_id], "cancelled")
    ctx.record_jobs(
        run, JobEffect.REQUEUED, {job_id: _old_nodes(ctx, job_id) for job_id in requeued}
    )
    ctx.record_jobs(
        run, JobEffect.CANCELLED, {job_id: _old_nodes(ctx, job_id) for job_id in cancelled}
    )
    ctx.context["requeued"] = sorted(set(ctx.context.get("requeued", [])) | set(requeued))
    ctx.context["cancelled"] = sorted(set(ctx.context.get("cancelled", [])) | set(cancelled))
    ctx.context.setdefault("requeued_at", ctx.now.isoformat())
    parts = [f"requeued {_ids(requeued)}"]
    if cancelled:
        parts.append(f"cancelled {_ids(cancelled)} (not requeueable)")
    if gone:
        parts.append(f"already finished {_ids(gone)}")
    return succeeded("; ".join(parts))


def requeue_or_cancel(run, ctx, jobs) -> tuple[list[int], list[int]]:
    """Preempt running jobs: requeue those that allow it, cancel the rest."""
    requeued, cancelled = [], []
    for job in jobs:
        if job.requeue:
            ctx.backend.requeue_job(job.job_id)
            requeued.append(job.job_id)
        else:
            ctx.backend.cancel_job(job.job_id)
            cancelled.append(job.job_id)
    nodes = {job.job_id: job.nodes for job in jobs}
    ctx.record_jobs(run, JobEffect.REQUEUED, {job_id: nodes[job_id] for job_id in requeued})
    ctx.record_jobs(run, JobEffect.CANCELLED, {job_id: nodes[job_id] for job_id in cancelled})
    ctx.notify_owners(run, requeued, "requeued")
    ctx.notify_owners(run, cancelled, "cancelled")
    return requeued, cancelled


@step("release_jobs", "start the requeued jobs now instead of after Slurm's hold")
def release_jobs(run, ctx):
    pending = [job_id for job_id in ctx.context.get("requeued", [])]
    if not pending:
        return skipped("no requeued jobs to release")
    releases = ctx.context.setdefault("releases", {})
    current = ctx.jobs()
    busy = _completing_nodes(ctx)
    notes, waits = [], []
    for job_id in pending:
        verdict = _release_one(run, ctx, job_id, current.get(job_id), releases, busy)
        if verdict is None:
            waits.append(job_id)
        elif verdict.startswith("killed"):
            return needs_attention(f"job {job_id} {verdict}; resubmit it by hand")
        else:
            notes.append(f"{job_id} {verdict}")
    if waits:
        waited = ctx.since("requeued_at")
        if waited is not None and waited.total_seconds() > RELEASE_PATIENCE_S:
            return succeeded(f"left job(s) {_ids(waits)} to Slurm's own start; " + _join(notes))
        verifying = all("released_at" in releases.get(str(job_id), {}) for job_id in waits)
        pause = min(1.0, _verify_after(ctx)) if verifying else 1.0
        return waiting(f"waiting to release job(s) {_ids(waits)} safely", pause)
    restarted = [int(key) for key, state in releases.items() if state.get("verified")]
    ctx.notify_owners(run, [j for j in restarted if not releases[str(j)].get("told")], "restarted")
    for job_id in restarted:
        releases[str(job_id)]["told"] = True
    return succeeded(_join(notes))


def _release_one(run, ctx, job_id, info, releases, busy) -> str | None:
    """'started'/'running'/... when done with the job, 'killed ...' on a bad release,
    None while it must wait."""
    record = releases.get(str(job_id), {})
    if info is None:
        return "is gone from Slurm"
    if info.state in FINISHED:
        if info.state == "COMPLETED":
            return f"ended as {info.state}"
        if record.get("left_to_slurm"):
            return f"killed again after its second requeue ({info.state})"
        if record.get("released_at"):
            return _requeue_after_a_bad_release(ctx, job_id, info, releases)
        return f"ended as {info.state}"
    if record.get("left_to_slurm"):
        if info.state in ("RUNNING", "CONFIGURING"):
            record["verified"] = True
            return "requeued again after its early release was refused, and running"
        return None
    if record.get("released_at"):
        if ctx.seconds_since(record["released_at"]) < _verify_after(ctx):
            return None
        record["verified"] = True
        return f"released and {info.state.lower()}"
    if info.state in ("RUNNING", "CONFIGURING"):
        return "already running"
    # Released before the old allocation is gone, Slurm once killed the job with
    # "Job credential revoked": wait until it is PENDING with no node completing,
    # and while the backend itself says it is too early.
    if info.state != "PENDING" or info.nodes or busy & set(_old_nodes(ctx, job_id)):
        return None
    try:
        ctx.backend.start_now(job_id)
    except BackendError as error:
        if error.permanent:
            raise
        return None
    releases[str(job_id)] = {"released_at": ctx.now.isoformat()}
    ctx.record_jobs(run, JobEffect.RELEASED, {job_id: _old_nodes(ctx, job_id)})
    return None


def _requeue_after_a_bad_release(ctx, job_id, info, releases) -> str | None:
    """Slurm can still refuse an early release ("Job credential revoked") and
    fail the job; requeue it once more and leave its start to Slurm, which
    waits out the old credential itself."""
    try:
        ctx.backend.requeue_job(job_id)
    except BackendError as error:
        if not error.permanent:
            raise
        return f"killed after its early release ({info.state}) and not requeueable: {error}"
    releases[str(job_id)] = {"left_to_slurm": True, "requeued_again_at": ctx.now.isoformat()}
    return None


def _verify_after(ctx) -> float:
    return float(ctx.context.get("verify_after_s", DEFAULT_VERIFY_AFTER_S))


def _old_nodes(ctx, job_id: int) -> list[str]:
    return (ctx.context.get("jobs") or {}).get(str(job_id), {}).get("nodes", [])


def _completing_nodes(ctx) -> set[str]:
    return {info.name for info in ctx.backend.nodes() if "completing" in info.flags}


def _ids(ids) -> str:
    return ", ".join(str(job_id) for job_id in ids) or "none"


def _join(notes: list[str]) -> str:
    return "; ".join(notes) or "nothing to release"
