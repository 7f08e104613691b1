"""Submitting, resubmitting, cancelling and progress reports: the only code that mutates jobs.

Each function checks permission first, calls Slurm outside any transaction (a slow
controller must not hold database locks), then records the result with a history
row and publishes the changed queue row after commit.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from clusters.backends import registry
from clusters.backends.base import BackendError, JobSubmission
from clusters.models import Cluster
from jobs import cluster_accounts
from jobs.access import (
    HIDDEN,
    can_act_on_job,
    can_submit,
    owns,
    redact_token,
    run_as_refusal,
)
from jobs.forms import stored_params
from jobs.live import poke_job_pages, publish_jobs
from jobs.models import (
    ACTIVE_JOB_STATES,
    Job,
    JobProgress,
    JobState,
    JobStateChange,
    JobTemplate,
    JobToken,
)
from jobs.models import hash_token as _hash
from jobs.sbatch import JobParams, render_sbatch

logger = logging.getLogger(__name__)


class SubmissionFailed(Exception):
    """Slurm refused or could not take the job; `message` is safe to show the user."""

    def __init__(self, message: str, *, permanent: bool = True):
        super().__init__(message)
        self.message = message
        self.permanent = permanent


class RunAsRefused(SubmissionFailed):
    """The Unix account the job would run as is root, a system account or nobody's."""


class NotYourScript(Exception):
    """A script would run as someone who did not write it (a 400): `fields` name the
    edits, and running them as oneself is the way out."""

    def __init__(self, message: str, *, fields=()):
        super().__init__(message)
        self.message = message
        self.fields = tuple(fields)


class JobNotActive(Exception):
    """The job has already ended, so it cannot be cancelled."""


class TokenRefused(Exception):
    """A progress token that is unknown, for another job, or for a job that has ended."""

    def __init__(self, message: str, *, ended: bool = False):
        super().__init__(message)
        self.message = message
        self.ended = ended


def submit_job(
    user, params: JobParams, *, run_as: str | None = None, cluster: Cluster | None = None
) -> Job:
    """Submit `params` to CLUSTER (default: the default cluster) as the user's Unix
    account there (or `run_as`); returns the Job row."""
    if not can_submit(user):
        raise PermissionDenied("Your role cannot submit jobs.")
    cluster = cluster or cluster_accounts.default_cluster()
    unix_user = run_as or cluster_accounts.unix_user_on(user, cluster)
    if unix_user is None:
        raise RunAsRefused(
            f"You have no Unix account on cluster {cluster.name}, so Medbay cannot submit there.",
        )
    if refusal := run_as_refusal(unix_user):
        logger.warning("Refused to submit as %r for %s", unix_user, user.get_username())
        raise RunAsRefused(refusal)
    raw_token = JobToken.new_raw()
    params = replace(params, portal_url=settings.MEDBAY_PORTAL_URL, progress_token=raw_token)
    script = render_sbatch(params)
    submission = JobSubmission(script=script, user=unix_user, workdir=params.workdir)
    try:
        slurm_id = registry.backend_for(cluster).submit_job(submission)
    except BackendError as error:
        logger.warning("sbatch refused a job for %s: %s", unix_user, error.message)
        raise SubmissionFailed(error.message, permanent=error.permanent) from error
    return _record_submission(cluster, user, unix_user, slurm_id, params, script, raw_token)


def _record_submission(cluster, user, unix_user, slurm_id, params, script, raw_token) -> Job:
    now = timezone.now()
    with transaction.atomic():
        # Slurm may have given this id to a job before (ids repeat): that job keeps
        # its row, and this one gets its own.
        Job.objects.filter(cluster=cluster, slurm_id=slurm_id, superseded=False).filter(
            ~Q(state__in=ACTIVE_JOB_STATES) | ~Q(user=unix_user)
        ).update(superseded=True)
        # The sync may already have created the row from squeue in the meantime;
        # either way the script, parameters and submitter are ours to fill in.
        job, created = Job.objects.get_or_create(
            superseded=False,
            cluster=cluster,
            slurm_id=slurm_id,
            defaults={
                "name": params.job_name,
                "user": unix_user,
                "account": params.account or "",
                "partition": params.partition,
                "state": JobState.PENDING,
                "node_count": params.nodes,
                "gpus": params.nodes * params.gpus_per_node,
                "submit_at": now,
                "time_limit_minutes": params.time_limit,
                "requeue": params.auto_resume,
                "updated_at": now,
            },
        )
        # Slurm got the token in the script; the row keeps it only hashed (JobToken).
        script = redact_token(script)
        Job.objects.filter(pk=job.pk).update(
            script=script, params=stored_params(params), submitted_by=user
        )
        job.script, job.params, job.submitted_by = script, stored_params(params), user
        if created:
            JobStateChange.objects.create(
                job=job,
                from_state="",
                to_state=JobState.PENDING,
                reason=f"submitted through Medbay as {unix_user}",
                actor=user.get_username(),
                at=now,
            )
        JobToken.store(job, raw_token)
        new_ids = [job.pk] if created else []
        transaction.on_commit(lambda: publish_jobs([job.pk], new_ids))
    return job


# Set from the partition's current limits when the form is read, not by the author.
DERIVED_PARAMS = ("signal_grace_s",)
_RULE = "Medbay never runs a script as someone who did not write it."


def resubmit_job(user, job: Job, params: JobParams, *, as_self: bool = False) -> Job:
    """A new job from (edited) parameters of `job`.

    Nobody runs code as someone else. The owner resubmits as herself, edited or not.
    Anyone else (an admin) either reruns the stored script unchanged as its owner,
    or, `as_self`, runs the edited parameters as their own Unix account, without
    the owner's set-up lines (which may hold her secrets).
    """
    check_resubmittable(user, job, as_self=as_self)
    if owns(user, job):
        return submit_job(user, params, run_as=job.user, cluster=job.cluster)
    if as_self:
        # The forms never show the owner's set-up lines to others; this also stops
        # a caller that carried them over from the stored parameters.
        theirs = set((job.params or {}).get("env_setup") or ())
        mine = tuple(line for line in params.env_setup if line not in theirs and line != HIDDEN)
        return submit_job(user, replace(params, env_setup=mine), cluster=job.cluster)
    return submit_job(user, stored_rerun(job, params), run_as=job.user, cluster=job.cluster)


def check_resubmittable(user, job: Job, *, as_self: bool = False) -> None:
    """Refuse, before any form is read, a resubmission that could never run.

    Raises PermissionDenied (not the owner or an admin), RunAsRefused (an owner
    Medbay must never run as) or NotYourScript (no script stored to rerun as its owner).
    """
    if not can_act_on_job(user, job):
        raise PermissionDenied("You may only resubmit your own jobs.")
    if as_self and not owns(user, job):
        return
    if refusal := run_as_refusal(job.user):
        raise RunAsRefused(f"Job {job.slurm_id} cannot be resubmitted: {refusal}")
    if not owns(user, job) and not job.params:
        raise NotYourScript(
            f"Job {job.slurm_id} was not submitted through Medbay: no script of "
            f"{job.user}'s is stored to rerun as {job.user}. {_RULE} Run it as yourself "
            f"(run_as: self).",
            fields=["run_as"],
        )


def stored_rerun(job: Job, params: JobParams) -> JobParams:
    """`params` if they are the job's stored ones, with the owner's set-up lines back.

    Raises NotYourScript naming each field that differs: an edited script never
    runs as someone who did not write it.
    """
    stored = job.params or {}
    theirs = tuple(stored.get("env_setup") or ())
    new = stored_params(params)
    edited = [
        name
        for name, value in new.items()
        if name not in ("env_setup", *DERIVED_PARAMS) and stored.get(name, value) != value
    ]
    # Left empty (the form never shows them) or as the API shows them, they are kept.
    setup = [line for line in params.env_setup if line != HIDDEN]
    if setup and tuple(setup) != theirs:
        edited.append("env_setup")
    if edited:
        raise NotYourScript(
            f"Job {job.slurm_id} is {job.user}'s: it reruns as {job.user} only unchanged. "
            f"{_RULE} To run your edits, run it as yourself (run_as: self).",
            fields=["run_as", *edited],
        )
    grace = stored.get("signal_grace_s", params.signal_grace_s)
    return replace(params, env_setup=theirs, signal_grace_s=grace)


def cancel_job(user, job: Job) -> Job:
    if not can_act_on_job(user, job):
        raise PermissionDenied("You may only cancel your own jobs.")
    if not job.is_active:
        raise JobNotActive(f"Job {job.slurm_id} has already ended ({job.state}).")
    try:
        registry.backend_for(job.cluster).cancel_job(job.slurm_id)
    except BackendError as error:
        if error.permanent:
            raise JobNotActive(error.message) from error
        raise SubmissionFailed(error.message, permanent=False) from error
    return _record_cancel(user, job)


def _record_cancel(user, job: Job) -> Job:
    now = timezone.now()
    reason = f"cancelled by {user.get_username()}"
    with transaction.atomic():
        changed = Job.objects.filter(pk=job.pk, state__in=ACTIVE_JOB_STATES).update(
            state=JobState.CANCELLED, reason=reason, end_at=now, updated_at=now
        )
        if changed:
            JobStateChange.objects.create(
                job=job,
                from_state=job.state,
                to_state=JobState.CANCELLED,
                reason=reason,
                actor=user.get_username(),
                restart_count=job.restart_count,
                at=now,
            )
            JobToken.objects.filter(job=job, revoked_at__isnull=True).update(revoked_at=now)
        transaction.on_commit(lambda: publish_jobs([job.pk]))
    job.refresh_from_db()
    return job


def token_for(raw: str, slurm_id: int) -> JobToken:
    """The live token for job `slurm_id`; refuses (and revokes) it once the job has ended."""
    token = (
        JobToken.objects.select_related("job")
        .filter(token_hash=_hash(raw), revoked_at__isnull=True)
        .first()
    )
    if token is None:
        raise TokenRefused("Unknown or revoked job token.")
    if token.job.slurm_id != slurm_id:
        raise TokenRefused("This token belongs to another job.")
    if not token.job.is_active:
        JobToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
        raise TokenRefused("The job has ended; its token no longer works.", ended=True)
    return token


def record_progress(
    token: JobToken, *, step: int, checkpoint_saved: bool, restart_count: int
) -> JobProgress:
    now = timezone.now()
    JobToken.objects.filter(pk=token.pk).update(last_used_at=now)
    progress = JobProgress.objects.create(
        job=token.job,
        step=step,
        checkpoint_saved=checkpoint_saved,
        restart_count=restart_count,
        reported_at=now,
    )
    if checkpoint_saved:
        # A checkpoint changes the story (where the job resumes from, the work a
        # restart lost): often the one written on TERM arrives after the restart
        # is already shown, and an open page must not keep the earlier account.
        job = token.job
        transaction.on_commit(lambda: poke_job_pages(job.cluster_id, [job.slurm_id]))
    return progress


def save_template(user, name: str, params: dict) -> JobTemplate:
    """Save (or overwrite) the user's template called `name`."""
    template, _ = JobTemplate.objects.update_or_create(
        owner=user, name=name, defaults={"params": params, "updated_at": timezone.now()}
    )
    return template


def delete_template(user, template_id: int) -> bool:
    deleted, _ = JobTemplate.objects.filter(pk=template_id, owner=user).delete()
    return bool(deleted)
