"""Slurm's pending reasons in plain words for the queue and the job page."""

from __future__ import annotations

from django.utils import timezone

from jobs.models import Job, JobState

PENDING_REASONS = {
    "Priority": "waiting: other jobs have higher priority",
    "Resources": "waiting for free nodes or GPUs",
    "Dependency": "waiting for the jobs it depends on to finish",
    "DependencyNeverSatisfied": "will never start: a job it depends on failed",
    "JobHeldAdmin": "held by an admin; ask them to release it",
    "JobHeldUser": "held by you; release it to let it start",
    "ReqNodeNotAvail": "waiting: a node it needs is down, drained or reserved",
    "PartitionTimeLimit": "will not start: its time limit is above the partition's maximum",
    "PartitionNodeLimit": "will not start: it asks for more nodes than the partition allows",
    "PartitionDown": "waiting: the partition is down",
    "PartitionInactive": "waiting: the partition is inactive",
    "QOSMaxGRESPerUser": "waiting: you are using your QOS's maximum number of GPUs",
    "QOSMaxJobsPerUserLimit": "waiting: you have as many running jobs as your QOS allows",
    "QOSMaxCpuPerUserLimit": "waiting: you are using your QOS's maximum number of CPUs",
    "QOSGrpGRES": "waiting: your group is using its QOS's GPU limit",
    "AssocGrpGRES": "waiting: your account is using its GPU limit",
    "AssocMaxJobsLimit": "waiting: your account has as many running jobs as allowed",
    "Reservation": "waiting for its reservation to start",
    "launch_failed_requeued_held": "held after a failed launch; ask an admin",
    "NodeDown": "waiting: a node it was given went down",
    "Licenses": "waiting for licenses",
    "None": "waiting to be scheduled",
}


def plain_reason(job: Job) -> str:
    """The job's reason as a sentence; empty for running or finished jobs without one."""
    reason = (job.reason or "").strip()
    if job.state != JobState.PENDING:
        # Slurm prints Reason=None for a running job: nothing to explain, not a word to show.
        return "" if reason == "None" else reason
    code = reason.split(",")[0].strip().strip("()")
    if code == "BeginTime":
        return _begin_time(job)
    return PENDING_REASONS.get(code, reason or "waiting to be scheduled")


def _begin_time(job: Job) -> str:
    if job.restart_count and job.eligible_at:
        at = timezone.localtime(job.eligible_at).strftime("%H:%M")
        return f"waiting: the job was requeued and may start at {at}"
    if job.eligible_at:
        at = timezone.localtime(job.eligible_at).strftime("%H:%M")
        return f"waiting for its start time ({at})"
    return "waiting for its start time"
