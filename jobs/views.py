"""Job pages: queue, new-job form with live preview, detail, resubmit, cancel, templates."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from clusters.addresses import asks_which_cluster
from clusters.models import Partition
from core import live
from core.roles import ANY_ROLE, Role, has_role, is_admin, role_required
from identity.cluster_view import viewed_cluster, viewed_name
from jobs import cluster_accounts, services
from jobs.access import (
    can_act_on_job,
    can_submit,
    can_view_script,
    default_account_for,
    owns,
    run_as_refusal,
    unix_user_for,
    visible_params,
    visible_script,
)
from jobs.forms import (
    RUN_AS_OWNER,
    RUN_AS_SELF,
    JobForm,
    ResubmitForm,
    initial_from_params,
    stored_params,
)
from jobs.models import JobState, JobTemplate
from jobs.queries import job_at, job_url
from jobs.queue import clean_params, queue_context
from jobs.sbatch import render_sbatch
from jobs.timeline import build_timeline
from portal.regions import pushable, shared_region

SUBMITTERS = (Role.RESEARCHER, Role.ADMIN)
REQUIRED = forms.Field.default_error_messages["required"]
OUTSIDE_MEDBAY = (
    "Job {job} was submitted outside Medbay, so Medbay never saw its script: Slurm does"
    " not report a job's command or working directory. Fill them in; the other fields"
    " are what Slurm reports of the job."
)


@pushable("job-rows")
@role_required(*ANY_ROLE)
def queue(request):
    params = clean_params(request.GET)
    if viewed_cluster(request) is not None:  # remembered, not in the address: put it there
        params["cluster"] = viewed_name(request)

    def page(template: str):
        context = {
            **queue_context(request.user, params),
            "states": ["ACTIVE", *JobState.values],
            "can_submit": can_submit(request.user),
        }
        return render(request, template, context)

    if request.htmx and request.htmx.target == "job-rows":
        # Admins and managers see the same rows; a researcher's depend on who she is.
        staff = is_admin(request.user) or has_role(request.user, Role.MANAGER)
        viewer = ("staff" if staff else f"user:{request.user.pk}") + f"@{viewed_name(request)}"
        rows = lambda: page("jobs/partials/job_rows.html")  # noqa: E731
        return shared_region(request, live.JOBS_REGION, rows, viewer=viewer)
    return page("jobs/queue.html")


@role_required(*SUBMITTERS)
def new_job(request):
    offered = cluster_accounts.submit_clusters(request.user)
    if request.method != "POST":
        form = JobForm(initial=_initial(request), cluster=offered[0], clusters=offered)
        return _form_page(request, form, title="New job", action="/jobs/new")
    cluster = cluster_accounts.chosen_cluster(offered, request.POST.get("cluster"))
    form = JobForm(request.POST, cluster=cluster, clusters=offered)
    if "save_template" in request.POST:
        return _save_template(request, form, "/jobs/new")
    if "preview" in request.POST or not form.is_valid():
        return _form_page(request, form, title="New job", action="/jobs/new")
    return _submit(
        request, form, lambda params: services.submit_job(request.user, params, cluster=cluster)
    )


@role_required(*SUBMITTERS)
@require_POST
def preview(request):
    offered = cluster_accounts.submit_clusters(request.user)
    cluster = cluster_accounts.chosen_cluster(offered, request.POST.get("cluster"))
    form = JobForm(request.POST, cluster=cluster, clusters=offered)
    return render(request, "jobs/partials/preview.html", _preview_context(form))


@role_required(*ANY_ROLE)
@asks_which_cluster
def detail(request, slurm_id: int, cluster: str = ""):
    job = job_at(request.user, slurm_id, cluster)
    if not cluster:
        return redirect(job_url(job))
    # The script first: hiding its set-up lines needs the parameters' own.
    job.script = visible_script(request.user, job) or ""
    job.params = visible_params(request.user, job)
    context = {**_story_context(request, job), "show_script": can_view_script(request.user, job)}
    return render(request, "jobs/detail.html", context)


@role_required(*ANY_ROLE)
@asks_which_cluster
def story(request, slurm_id: int, cluster: str = ""):
    """The live part of the job page, fetched again when the page is told the job changed."""
    job = job_at(request.user, slurm_id, cluster)
    return render(request, "jobs/partials/story.html", _story_context(request, job))


def _story_context(request, job) -> dict:
    timeline = build_timeline(job)
    lost = [r.lost_gpu_hours for r in timeline.restarts if r.lost_gpu_hours is not None]
    job.lost_gpu_hours = round(sum(lost), 2) if lost else None
    return {
        "job": job,
        "progress": job.progress_reports.order_by("-reported_at", "-id")[:10],
        "timeline": timeline,
        "can_act": can_act_on_job(request.user, job),
        "partition_time_limit": _partition_time_limit(job),
    }


def _partition_time_limit(job) -> int | None | str:
    """Minutes a job without its own limit may run: the partition's MaxTime; None
    when the partition sets none, "" when Medbay does not know the partition."""
    limits = Partition.objects.filter(cluster_id=job.cluster_id, name=job.partition)
    found = limits.values_list("max_time_minutes", flat=True).first()
    if found is None and not limits.exists():
        return ""
    return found


@role_required(*SUBMITTERS)
@asks_which_cluster
def resubmit(request, slurm_id: int, cluster: str = ""):
    job = job_at(request.user, slurm_id, cluster)
    if not can_act_on_job(request.user, job):
        raise PermissionDenied("You may only resubmit your own jobs.")
    action = job_url(job, "resubmit")
    title = f"Resubmit job {job.slurm_id}"
    mine = owns(request.user, job)
    who = {"owner": None if mine else job.user, "me": unix_user_for(request.user)}
    cluster = job.cluster  # a resubmitted job runs where it ran
    if request.method != "POST":
        initial = initial_from_params(job.params or _params_of(job))
        if not mine:
            # Set-up lines may hold secrets: only the owner sees them, and they go
            # with her stored script only (services keep them).
            initial.pop("env_setup", None)
            stored = bool(job.params) and not run_as_refusal(job.user)
            initial["run_as"] = RUN_AS_OWNER if stored else RUN_AS_SELF
        form = ResubmitForm(initial=initial, cluster=cluster, **who)
        notice = "" if job.params else OUTSIDE_MEDBAY.format(job=job.slurm_id)
        return _form_page(request, form, title=title, action=action, notice=notice)
    form = ResubmitForm(request.POST, cluster=cluster, **who)
    if "save_template" in request.POST:
        return _save_template(request, form, action)
    if "preview" in request.POST or not form.is_valid():
        return _form_page(request, form, title=title, action=action)
    as_self = form.as_self
    return _submit(
        request,
        form,
        lambda params: services.resubmit_job(request.user, job, params, as_self=as_self),
    )


@role_required(*ANY_ROLE)
@require_POST
@asks_which_cluster
def cancel(request, slurm_id: int, cluster: str = ""):
    job = job_at(request.user, slurm_id, cluster)
    if not can_act_on_job(request.user, job):
        raise PermissionDenied("You may only cancel your own jobs.")
    if request.POST.get("confirm") != "yes":
        # The page asks first; a bare POST (an old form, a stray click) cancels nothing.
        messages.error(request, f"Job {job.slurm_id} was not cancelled: confirm it first.")
        return redirect(job_url(job))
    try:
        services.cancel_job(request.user, job)
        messages.success(request, f"Job {job.slurm_id} cancelled.")
    except services.JobNotActive as error:
        messages.error(request, str(error))
    except services.SubmissionFailed as error:
        messages.error(request, f"Slurm did not cancel the job: {error.message}")
    return redirect(job_url(job))


@role_required(*SUBMITTERS)
def template_list(request):
    templates = JobTemplate.objects.filter(owner=request.user)
    return render(request, "jobs/templates.html", {"templates": templates})


@role_required(*SUBMITTERS)
@require_POST
def template_delete(request, template_id: int):
    if services.delete_template(request.user, template_id):
        messages.success(request, "Template deleted.")
    else:
        messages.error(request, "No such template of yours.")
    return redirect("/jobs/templates/")


def _initial(request) -> dict:
    template_id = request.GET.get("template", "")
    if template_id.isdigit():
        template = get_object_or_404(JobTemplate, pk=int(template_id), owner=request.user)
        return initial_from_params(template.params)
    account = default_account_for(request.user)
    return {"account": account} if account else {}


def _params_of(job) -> dict:
    """Best guess for jobs submitted outside Medbay: what Slurm told us about them."""
    nodes = max(job.node_count, 1)
    return {
        "job_name": job.name,
        "partition": job.partition,
        "account": job.account or None,
        "nodes": nodes,
        "gpus_per_node": job.gpus // nodes,
        "time_limit": job.time_limit_minutes or 60,
    }


def _form_page(request, form, *, title: str, action: str, notice: str = ""):
    context = {"form": form, "title": title, "action": action, "notice": notice}
    context.update(_preview_context(form))
    return render(request, "jobs/new.html", context, status=400 if form.errors else 200)


def _preview_context(form) -> dict:
    """The script, or what stops it: the fields still empty, or every error by its label."""
    shown = form if form.is_bound else form.prefilled()
    if shown.is_valid():
        return {"script": render_sbatch(shown.params), "preview_errors": [], "to_fill": []}
    errors = [
        (shown[name].label if name in shown.fields else "", message)
        for name, messages in shown.errors.items()
        for message in messages
    ]
    if not form.is_bound:
        # A form that opens empty or part-filled is not wrong yet: name what is missing.
        required = [label for label, message in errors if message == REQUIRED]
        if len(required) == len(errors):
            return {"script": None, "preview_errors": [], "to_fill": required}
    return {"script": None, "preview_errors": errors, "to_fill": []}


def _submit(request, form, submit):
    try:
        job = submit(form.params)
    except services.NotYourScript as error:
        form.add_error(None, error.message)
        for field in error.fields:
            if field in form.fields and field != "run_as":
                form.add_error(field, "Changed from the stored job.")
        return _form_page(request, form, title="New job", action=request.path)
    except services.SubmissionFailed as error:
        form.add_error(None, f"Slurm refused the job: {error.message}")
        return _form_page(request, form, title="New job", action=request.path)
    messages.success(request, f"Job {job.slurm_id} submitted as {job.user}.")
    return redirect(job_url(job))


def _save_template(request, form, action: str):
    name = request.POST.get("template_name", "").strip()
    if not name or len(name) > 64:
        form.is_valid()
        form.add_error(None, "Give the template a name of at most 64 characters.")
        return _form_page(request, form, title="New job", action=action)
    if not form.is_valid():
        return _form_page(request, form, title="New job", action=action)
    services.save_template(request.user, name, stored_params(form.params))
    messages.success(request, f"Template {name!r} saved.")
    return redirect("/jobs/templates/")
